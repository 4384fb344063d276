"""``tinygpt sweep``: submit a sweep config to this machine's dashboard home, or to one at a URL."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

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
    """POST /api/sweeps with the config as JSON (and the API token, when one is set)."""
    body = parse_sweep_text(text).model_dump(mode="json", exclude_none=True)
    headers = {"Content-Type": "application/json"}
    if settings.api_token is not None:
        headers["Authorization"] = f"Bearer {settings.api_token.get_secret_value()}"
    request = urllib.request.Request(f"{url.rstrip('/')}/api/sweeps", data=json.dumps(body).encode(),
                                     headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = json.loads(exc.read() or b"{}").get("detail", exc.reason)
        if isinstance(detail, list) and detail:
            raise Invalid(detail[0]["msg"], field=".".join(str(p) for p in detail[0]["loc"][1:])) from None
        raise AppError(str(detail), status_code=exc.code) from None
    except urllib.error.URLError as exc:
        raise AppError(f"cannot reach {url}: {exc.reason}") from None
