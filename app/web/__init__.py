"""The HTML pages (Jinja2 templates, htmx fragments): runs, the new-run form, compare, sweeps, benchmarks, login.
The JSON API is app/api/; both are thin over app/services/."""
