"""The pages' CSS, JavaScript and vendored libraries: shipped inside the wheel as the package ``app.static``
(pyproject.toml), found by the app through importlib.resources (app/static_files.py)."""
