"""Who may read and change things: the API token, the browser's login cookie, cross-site and host checks.

The model (README, "Security"): bound to a loopback address (the default) and without a token, the
dashboard serves the people on its own machine; bound to any other address it must have
``TINYGPT_API_TOKEN``. With a token set, every route needs it (``Authorization: Bearer TOKEN`` from
scripts, or the cookie the ``/login`` page sets in browsers) except ``/healthz``, ``/login`` and the
static assets; ``TINYGPT_PUBLIC_READ=true`` opens the reads (GET) to anyone, except the model
files (checkpoints, exports). Independently of the token:

- a state-changing request that a browser marks as coming from another site is refused
  (``Sec-Fetch-Site`` / ``Origin`` checks: cross-site request forgery);
- bound to loopback, the app answers only to loopback host names (DNS rebinding);
- request bodies are capped while they stream in (:class:`BodyLimitMiddleware`).

Paths are matched below the app's root path (``TINYGPT_ROOT_PATH``), so the rules hold behind a proxy.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import re
from urllib.parse import urlsplit

from fastapi import Request
from pydantic import SecretStr
from starlette._utils import get_route_path
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .db import session_scope
from .errors import AppError
from .failed_auth import FailedAuth
from .redaction import show_secrets
from .services.run_tokens import request_run_id, run_token_valid, token_run_id
from .services.sessions import session_is_valid
from .settings import Settings
from .templating import templates

SESSION_COOKIE = "tinygpt_session"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
OPEN_PATHS = frozenset({"/login", "/logout", "/healthz"})  # reachable without the token (the login form posts it)
# model files (a run's checkpoint, its exports, an MLflow run's artifacts): never open to readers
PRIVATE_READS = re.compile(r"/api/runs/\d+/(checkpoint|export)|/api/2\.0/mlflow-artifacts/artifacts/.+")
LOOPBACK_NAMES = ("127.0.0.1", "localhost")
UPLOAD_PATHS = frozenset({"/api/datasets", "/partials/datasets", "/api/runs/import"})
CHECKPOINT_UPLOAD = re.compile(r"/api/runs/\d+/checkpoint|/api/2\.0/mlflow-artifacts/artifacts/.+")
MODEL_QUERIES = re.compile(r"/api/runs/\d+/(sample|neighbors|inside(/checkpoints|/diff|/embeddings)?)")


class Unauthorized(AppError):
    status_code = 401


class Forbidden(AppError):
    status_code = 403


class BindError(ValueError):
    """The app was asked to bind where it may not (another address without a token)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine only.

    >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0")
    (True, True, False)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(settings: Settings, host: str) -> None:
    """Refuse to serve another address than loopback without an API token."""
    if not is_loopback(host) and settings.api_token is None:
        raise BindError(f"binding to {host} needs an API token: set TINYGPT_API_TOKEN (README, Security), "
                        "or bind to 127.0.0.1")


MIN_TOKEN_CHARS = 16
#: Tokens long enough that people still pick (from lists of leaked passwords and of examples in docs).
COMMON_TOKENS = frozenset({
    "1234567890123456", "12345678901234567890", "0000000000000000", "1111111111111111", "passwordpassword",
    "password12345678", "password1234567890", "changemechangeme", "changeme12345678", "qwertyuiopasdfgh",
    "qwertyuiop123456", "iloveyouiloveyou", "letmeinletmeinle", "secretsecretsecret", "adminadminadmin1",
    "administrator123", "correcthorsebatterystaple", "correct-horse-battery-staple", "your-token-here",
    "my-secret-token-here", "tinygpt-dashboard", "tinygpt-dashboard-token", "abcdefghijklmnop",
    "abcdefghijklmnopqrstuvwxyz",
})


class WeakToken(ValueError):
    """``TINYGPT_API_TOKEN`` is too easy to guess: the app refuses to start with it."""


def check_token_strength(settings: Settings) -> None:
    """Refuse a token shorter than 16 characters, one of few distinct characters, or a common one.

    >>> check_token_strength(Settings(api_token="s3cret"))
    Traceback (most recent call last):
    ...
    app.security.WeakToken: TINYGPT_API_TOKEN is too easy to guess: 6 characters, at least 16 needed; `tinygpt token` prints a fresh random one
    """
    if settings.api_token is None:
        return
    token = settings.api_token.get_secret_value()
    problem = None
    if len(token) < MIN_TOKEN_CHARS:
        problem = f"{len(token)} characters, at least {MIN_TOKEN_CHARS} needed"
    elif token.lower() in COMMON_TOKENS or len(set(token)) < 6:
        problem = "it is a common token"
    if problem:
        raise WeakToken(f"TINYGPT_API_TOKEN is too easy to guess: {problem}; `tinygpt token` prints a fresh "
                        "random one")


def token_matches(presented: str, token: SecretStr) -> bool:
    """Constant-time comparison (the time taken does not tell how much of a guess was right)."""
    return hmac.compare_digest(presented.encode(), token.get_secret_value().encode())


def presented_bearer(request: Request) -> str | None:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


def cookie_valid(request: Request, cookie: str, token: SecretStr) -> bool:
    """The cookie of a live login session (``app/services/sessions.py``: expires, ends at logout and when the
    token changes)."""
    with session_scope(request.app.state.settings) as session:
        return session_is_valid(session, secret=cookie, token=token)


def has_credentials(request: Request, token: SecretStr) -> bool:
    """The bearer token (compared in constant time), or the cookie of a live login session."""
    bearer, cookie = presented_bearer(request), request.cookies.get(SESSION_COOKIE)
    return (bearer is not None and token_matches(bearer, token)) or bool(cookie and cookie_valid(request, cookie, token))


def client_address(request: Request) -> str:
    """The connection's address, or what a trusted proxy named (``TINYGPT_FORWARDED_ALLOW_IPS``)."""
    return request.client.host if request.client else "unknown"


def from_this_site(request: Request) -> bool:
    """False when the browser says the request comes from another site.

    Browsers send ``Sec-Fetch-Site`` (and ``Origin`` on posts); scripts such as curl send
    neither and are judged by the token alone.
    """
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc == request.headers.get("host")


def route_path(scope: Scope) -> str:
    """The request's path below the app's root path: what the routes are matched against."""
    return get_route_path(scope)


def is_api(path: str) -> bool:
    return path.startswith("/api/") or path == "/healthz"


def needs_token(request: Request, settings: Settings) -> bool:
    """Whether this request must carry the token (a token is set; see the module docstring). Asking a run's
    model (sample, nearest tokens: each may load a checkpoint) is open to readers only with
    ``TINYGPT_PUBLIC_SAMPLING``."""
    path = route_path(request.scope)
    if path in OPEN_PATHS:
        return False
    if MODEL_QUERIES.fullmatch(path):
        return not model_queries_open(settings)
    public_read = settings.public_read and request.method in ("GET", "HEAD")
    return not public_read or PRIVATE_READS.fullmatch(path) is not None


def model_queries_open(settings: Settings) -> bool:
    """Readers without the token may ask runs' models."""
    return settings.public_read and settings.public_sampling


def may_query_model(request: Request) -> bool:
    """Whether the visitor may ask a run's model (the run page shows the sample box only then)."""
    settings: Settings = request.app.state.settings
    return settings.api_token is None or request.state.signed_in or model_queries_open(settings)


async def guard(request: Request) -> None:
    """The dependency every route runs first (see the module docstring)."""
    settings: Settings = request.app.state.settings
    if request.method in UNSAFE_METHODS and not from_this_site(request):
        raise Forbidden("cross-site request refused: submit the form from this dashboard's own pages")
    token = settings.api_token
    request.state.signed_in = token is not None and authenticated(request, token, settings)
    show_secrets(token is None or request.state.signed_in)  # webhook URLs: app/redaction.py


def authenticated(request: Request, token: SecretStr, settings: Settings) -> bool:
    """Whether the request is the token holder's; False for one it may make without (a run's own token, an open
    path, a public read). Each wrong credential that decides the request counts against its address
    (``app/failed_auth.py``): 429 while the address is refused, 401 or 403 otherwise."""
    needed = needs_token(request, settings)
    bearer, cookie = presented_bearer(request), request.cookies.get(SESSION_COOKIE)
    deciding = bearer is not None or bool(cookie and needed)  # a stale cookie on a public page decides nothing
    failures: FailedAuth = request.app.state.failed_auth
    address = client_address(request)
    if deciding:
        failures.check(address)
    if (bearer is not None and token_matches(bearer, token)) or (cookie and cookie_valid(request, cookie, token)):
        failures.succeeded(address)
        return True
    try:
        if run_token_allows(request):
            return False
    except Unauthorized:
        failures.failed(address)
        raise
    if deciding:
        failures.failed(address)
    if needed:
        raise Unauthorized("this dashboard needs its API token: send `Authorization: Bearer TOKEN`, "
                           "or log in at /login")
    return False


def run_token_allows(request: Request) -> bool:
    """A Slurm job's run-scoped token (``app/services/run_tokens.py``) reporting for its own, unfinished run.
    Such a token presented for anything else is refused, saying so (403); False when none is presented."""
    scheme, _, presented = request.headers.get("authorization", "").partition(" ")
    token_run = token_run_id(presented.strip()) if scheme.lower() == "bearer" else None
    if token_run is None:
        return False
    asked = request_run_id(request.method, route_path(request.scope))
    if asked != token_run:
        raise Forbidden(f"a run's token reports for run {token_run} only (POST /api/runs/{token_run}/report, "
                        f"PUT /api/runs/{token_run}/checkpoint)")
    with session_scope(request.app.state.settings) as session:
        if not run_token_valid(session, presented=presented.strip(), run_id=token_run):
            raise Unauthorized(f"run {token_run}'s token is not valid: it was replaced, or the run has finished")
    return True


def safe_next(target: str | None) -> str:
    """Where to go after logging in: a path on this site only (never another host)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


class BodyLimitMiddleware:
    """Cap request bodies while they arrive: a declared size over the cap gets 413 before any of it
    is read, and a body that grows past it (chunked, or lying about its size) is cut off with 413.

    Uploads (``UPLOAD_PATHS``: datasets, run imports) may reach ``max_upload_mb``, checkpoint and MLflow artifact uploads
    ``max_checkpoint_mb``; other requests ``max_request_kb``.
    """

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    def limit_for(self, path: str, method: str) -> tuple[int, str, str]:
        if method == "PUT" and CHECKPOINT_UPLOAD.fullmatch(path):
            mb = self.settings.max_checkpoint_mb
            return int(mb * 1_000_000), "body", f"checkpoint is larger than the limit of {mb:g} MB"
        if path in UPLOAD_PATHS:
            mb = self.settings.max_upload_mb
            return int(mb * 1_000_000) + 64 * 1024, "file", f"file is larger than the upload limit of {mb:g} MB"
        kb = self.settings.max_request_kb
        return kb * 1024, "body", f"request body is larger than the limit of {kb} KB"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = route_path(scope)
        limit, field, message = self.limit_for(path, scope["method"])
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            await send_too_large(send, path, field, message)
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            msg = await receive()
            if msg["type"] == "http.request":
                received += len(msg.get("body", b""))
                if received > limit:
                    raise HTTPException(413, detail=[{"loc": ["body", field], "msg": message, "type": "value_error"}],
                                        headers={"Connection": "close"})  # stop reading the rest
            return msg

        await self.app(scope, limited, send)


async def send_too_large(send: Send, path: str, field: str, message: str) -> None:
    """A 413 sent before the body is read: the API's field-error JSON, or the pages' error fragment."""
    if is_api(path):
        body = json.dumps({"detail": [{"loc": ["body", field], "msg": message, "type": "value_error"}]}).encode()
        kind = b"application/json"
    else:
        body = templates.get_template("_error.html").render(status=413, message=message).encode()
        kind = b"text/html; charset=utf-8"
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", kind), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
