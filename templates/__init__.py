"""The pages' Jinja2 templates: shipped inside the wheel as the package ``app.templates`` (pyproject.toml), found
by the app through importlib.resources (app/templating.py)."""
