"""tinygpt: train, sample and inspect tiny GPTs (tokenizer, model, presets, devices, training, sampling).

Depends on torch, regex and the standard library only (the command line adds tqdm
for its progress bar); it never imports the dashboard's ``app`` or ``worker``.
"""

from importlib.metadata import PackageNotFoundError, version

try:  # the one declaration of the version is pyproject.toml's: the installed package's metadata carries it
    __version__ = version("tinygpt-dashboard")
except PackageNotFoundError:  # a checkout on the path, never installed
    __version__ = "0+unknown"
