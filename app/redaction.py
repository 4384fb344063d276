"""Secrets in what the app shows: webhook URLs (a Slack or Discord URL is itself the key to post there).

Whether the person asking may see them is decided once per request, by the guard (``app/security.py``):
those who hold the token (or everyone, when no token is set: the dashboard then serves only its own
machine). Everyone else, readers let in by ``TINYGPT_PUBLIC_READ``, sees each URL as its scheme and host
only. Everything that shows a run's or a sweep's options passes them through :func:`shown_config`;
outside a request (the worker, the command line) nothing is shown to anyone, and secrets stay hidden.

>>> redact_url("https://hooks.slack.com/services/T000/B000/XXXX")
'https://hooks.slack.com/…'
"""

from __future__ import annotations

from contextvars import ContextVar
from urllib.parse import urlsplit

_shows_secrets: ContextVar[bool] = ContextVar("shows_secrets", default=False)


def show_secrets(allowed: bool) -> None:
    """Set by the guard for the request being served."""
    _shows_secrets.set(allowed)


def shows_secrets() -> bool:
    return _shows_secrets.get()


def redact_url(url: str) -> str:
    parts = urlsplit(str(url))
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname or ''}{port}/…"


def shown_config(config: dict) -> dict:
    """A run's options as this request may see them: ``notify.urls`` redacted unless it holds the token
    (``base.notify.urls`` for a sweep's options)."""
    if shows_secrets():
        return config
    shown = dict(config)
    notify = shown.get("notify")
    if isinstance(notify, dict) and notify.get("urls"):
        shown["notify"] = {**notify, "urls": [redact_url(u) for u in notify["urls"]]}
    if isinstance(shown.get("base"), dict):
        shown["base"] = shown_config(shown["base"])
    return shown
