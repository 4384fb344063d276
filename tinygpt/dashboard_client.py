"""A small client for a TinyGPT dashboard's REST API: what ``tinygpt train --report-to``, ``tinygpt sync``
and ``tinygpt import`` send. Standard library only (``http.client``): the library depends on torch and regex alone.

Errors, each one line: :class:`DashboardUnreachable` (nothing answered: connection refused, timeout, DNS),
:class:`TokenRefused` (401/403) and :class:`DashboardRejected` (any other refusal, with the API's message
naming the field). Redirects are never followed (the token would go wherever one points): a redirect is a
refusal that names its target.
"""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from urllib.parse import urlsplit

TIMEOUT_SEC = 15.0
UPLOAD_CHUNK = 1 << 20
STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)  # every request is idempotent here


class DashboardError(ValueError):
    """The dashboard refused what was sent (a usage error: one line, exit code 2)."""


class TokenRefused(DashboardError):
    pass


class DashboardRejected(DashboardError):
    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


class DashboardUnreachable(OSError):
    """Nothing answered (or the answer was cut off): worth trying again later."""


def check_dashboard_url(url: str) -> str:
    """The dashboard's base address, without a trailing slash; ValueError for anything but http(s)://HOST[:PORT]."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise DashboardError(f"the dashboard URL must look like http://HOST:PORT, got {url!r}")
    try:
        parts.port  # noqa: B018 (raises for a port that is not a number)
    except ValueError:
        raise DashboardError(f"the dashboard URL has a bad port: {url!r}") from None
    return url.strip().rstrip("/")


def error_message(status: int, body: bytes) -> str:
    """The API's own message: ``detail`` as a string, or its first field error as "field: message"."""
    try:
        detail = json.loads(body).get("detail")
    except (ValueError, AttributeError):
        return f"HTTP {status}"
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):
        first = detail[0]
        where = ".".join(str(p) for p in first.get("loc", []) if p != "body")
        return f"{where}: {first.get('msg')}" if where else str(first.get("msg"))
    return str(detail) if detail else f"HTTP {status}"


class DashboardClient:
    """One kept-alive connection (a reporter sends a few requests a second: no new TCP connection each
    time); a failed request drops it and the next one connects again. Not shared between threads."""

    def __init__(self, url: str, token: str | None = None, timeout: float = TIMEOUT_SEC) -> None:
        self.url = check_dashboard_url(url)
        parts = urlsplit(self.url)
        self.connection_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        self.netloc, self.prefix = parts.netloc, parts.path
        self.token = token
        self.timeout = timeout
        self.connection: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, *, body: object = None, data: object = None,
                headers: dict | None = None) -> dict | list:
        """JSON in (``body``) or raw bytes/an iterable of bytes (``data``), JSON out."""
        head = {"Accept": "application/json", "User-Agent": "tinygpt", **(headers or {})}
        if self.token:
            head["Authorization"] = f"Bearer {self.token}"
        if body is not None:
            data = json.dumps(body).encode()
            head["Content-Type"] = "application/json"
        reused = self.connection is not None
        try:
            try:
                status, text, location = self.exchange(method, self.prefix + path, data, head)
            except STALE as exc:  # the server closed a kept-alive connection meanwhile: once more, on a new one
                if not reused or not isinstance(data, bytes | None):
                    raise exc
                self.close()
                status, text, location = self.exchange(method, self.prefix + path, data, head)
        except (OSError, http.client.HTTPException) as exc:  # refused, reset, timed out, cut off
            self.close()
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__  # "Connection refused"
            raise DashboardUnreachable(f"cannot reach {self.url} ({reason})") from None
        if 300 <= status < 400:
            raise DashboardRejected(status, f"{self.url} answered a redirect ({status}) to {location or 'nowhere'}: "
                                            "give the dashboard's own address (redirects are not followed, so the "
                                            "token never goes elsewhere)")
        if status in (401, 403):
            raise TokenRefused(f"the dashboard at {self.url} refused the API token ({error_message(status, text)})")
        if status in (502, 503, 504):
            raise DashboardUnreachable(f"{self.url} answered {status}")
        if status >= 400:
            raise DashboardRejected(status, error_message(status, text))
        if not text and status != 204:
            raise DashboardUnreachable(f"{self.url} gave an empty answer (not a dashboard?)")
        try:
            return json.loads(text or b"null")
        except ValueError as exc:  # an answer that is not JSON: not a dashboard, or cut off
            raise DashboardUnreachable(f"{self.url} gave an unreadable answer ({exc})") from None

    def exchange(self, method: str, path: str, data: object, headers: dict) -> tuple[int, bytes, str | None]:
        """One request: (status, body, a redirect's Location)."""
        if self.connection is None:
            self.connection = self.connection_class(self.netloc, timeout=self.timeout)
        self.connection.request(method, path, body=data, headers=headers)
        response = self.connection.getresponse()
        text = response.read()
        if response.will_close:
            self.close()
        return response.status, text, response.getheader("Location")

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None

    def create_reported_run(self, payload: dict) -> dict:
        return self.request("POST", "/api/runs/reported", body=payload)

    def send_items(self, run_id: int, items: list[dict]) -> dict:
        return self.request("POST", f"/api/runs/{run_id}/report", body={"items": items})

    def upload_checkpoint(self, run_id: int, path: Path, seq: int | None = None) -> dict:
        """Stream ``path`` (never read whole into memory) to the run's checkpoint."""
        size = path.stat().st_size

        def chunks():  # noqa: ANN202
            with open(path, "rb") as f:
                while chunk := f.read(UPLOAD_CHUNK):
                    yield chunk

        query = f"?seq={seq}" if seq is not None else ""
        return self.request("PUT", f"/api/runs/{run_id}/checkpoint{query}", data=chunks(),
                            headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)})

    def import_run(self, payload: dict) -> dict:
        return self.request("POST", "/api/runs/import", body=payload)

    def import_foreign(self, payload: dict) -> dict:
        return self.request("POST", "/api/runs/import-foreign", body=payload)

    def create_sweep(self, payload: dict) -> dict:
        return self.request("POST", "/api/sweeps", body=payload)
