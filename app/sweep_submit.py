"""``tinygpt sweep``: submit a sweep config to this machine's dashboard home, or to one at a URL."""

from __future__ import annotations

from tinygpt.dashboard_client import DashboardClient, DashboardError, DashboardRejected, DashboardUnreachable

from .db import init_db, session_scope
from .errors import AppError, Invalid
from .services.sweeps import create_sweep, parse_sweep_text
from .settings import Settings


def submit_local(text: str, settings: Settings) -> dict:
    """Straight into the home's database (no app needed); the workers pick the trials up."""
    body = parse_sweep_text(text)
    init_db(settings)
    with session_scope(settings) as s:
        sweep = create_sweep(s, body=body, settings=settings)
        return {"id": sweep.id, "name": sweep.name, "trials_planned": sweep.trials_planned}


def submit_remote(text: str, url: str, settings: Settings) -> dict:
    """POST /api/sweeps with the config as JSON (and the API token, when one is set), through the library's
    dashboard client: one-line errors, and no redirect followed (the token stays with the address given)."""
    body = parse_sweep_text(text).model_dump(mode="json", exclude_none=True)
    token = settings.api_token.get_secret_value() if settings.api_token is not None else None
    try:
        client = DashboardClient(url, token, timeout=60)
        return client.create_sweep(body)
    except DashboardRejected as exc:
        field, _, message = str(exc).partition(": ")
        if message and exc.status == 422:
            raise Invalid(message, field=field) from None
        raise AppError(str(exc), status_code=exc.status) from None
    except (DashboardError, DashboardUnreachable) as exc:
        raise AppError(str(exc)) from None
