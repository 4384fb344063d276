"""The folder to put first on a W&B-style script's path (``PYTHONPATH=$(tinygpt wandb-path)``): its ``wandb``
package reports to the dashboard instead of W&B. See ``wandb/__init__.py``.

>>> from pathlib import Path
>>> (Path(__path__[0]) / "wandb" / "__init__.py").is_file()
True
"""
