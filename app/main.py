"""The FastAPI application: REST API, event streams (OpenAPI at /docs)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware

from tinygpt import __version__

from . import api_docs
from .api import (
    benchmarks,
    catalog,
    events,
    export,
    foreign_runs,
    groups,
    inside,
    mlflow,
    reports,
    runs,
    sweeps,
    wandb,
)
from .db import init_db, session_scope
from .errors import AppError, Invalid, NotFound
from .failed_auth import FailedAuth
from .security import (
    LOOPBACK_NAMES,
    BodyLimitMiddleware,
    Unauthorized,
    check_token_strength,
    guard,
    is_api,
    is_loopback,
    route_path,
    safe_next,
)
from .services.datasets import ensure_builtin
from .services.hub import EventHub
from .services.outbox import compact_forever
from .services.sampling import ModelCache
from .settings import Settings, get_settings
from .static_files import STATIC, CachedStaticFiles
from .templating import render
from .web import groups as group_pages
from .web import inside_pages, login, notes, pages, sweep_pages


def create_app(settings: Settings | None = None, host: str | None = None) -> FastAPI:
    """The app; ``host`` is the address it will be bound to (default: the setting), which decides
    the host names it answers to (see :mod:`app.security`)."""
    settings = settings or get_settings()
    check_token_strength(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        settings.home_dir.mkdir(parents=True, exist_ok=True)
        init_db(settings)
        with session_scope(settings) as session:
            ensure_builtin(session, settings=settings)
        app.state.settings = settings
        app.state.hub = EventHub(settings)
        app.state.hub.start()
        compaction = asyncio.create_task(compact_forever(settings))  # the event outbox stays bounded
        warming = threading.Thread(target=warm_up, name="warm-up")
        warming.start()
        yield
        compaction.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await compaction
        await app.state.hub.stop()
        await run_in_threadpool(warming.join)  # never a thread still working while the interpreter exits

    # the documentation pages and the schema are routes of our own (app/api_docs.py): offline, and guarded
    app = FastAPI(title="TinyGPT Dashboard", version=__version__, lifespan=lifespan, dependencies=[Depends(guard)],
                  docs_url=None, redoc_url=None, openapi_url=None)
    app.state.settings = settings  # the guard reads it from the first request on
    app.state.streams = events.StreamCounter()
    app.state.models = ModelCache(settings.model_loads_per_minute)  # the sample box's and neighbours' models
    app.state.failed_auth = FailedAuth(allowed=settings.auth_failures_allowed)  # guessing the token is not free
    app.add_middleware(BodyLimitMiddleware, settings=settings)
    if is_loopback(host or settings.host):
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=[*LOOPBACK_NAMES, *settings.allowed_hosts])

    @app.exception_handler(AppError)
    async def app_error(request: Request, exc: AppError) -> Response:
        """JSON for the API, a fragment for htmx, a page for a browser."""
        path = route_path(request.scope)
        if is_api(path) or path == "/openapi.json":
            headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else {}
            return JSONResponse({"detail": exc.detail()}, status_code=exc.status_code,
                                headers={**headers, **exc.headers()})
        if isinstance(exc, Unauthorized) and not request.headers.get("HX-Request"):
            target = safe_next(path + (f"?{request.url.query}" if request.url.query else ""))
            return render(request, "login.html", 401, next=target)
        name = "_error.html" if request.headers.get("HX-Request") else "error.html"
        response = render(request, name, exc.status_code, status=exc.status_code, message=exc.message)
        response.headers.update(exc.headers())
        return response

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> Response:
        """FastAPI's 422, made safe for inputs JSON or UTF-8 cannot hold (``NaN``, a lone surrogate): shown as text.
        A page answers a page: 404 for a path that names nothing (``/sweeps/new``), 422 with the first error."""
        errors = json_safe(jsonable_encoder(exc.errors()))
        path = route_path(request.scope)
        if is_api(path) or path == "/openapi.json":
            return JSONResponse({"detail": errors}, status_code=422)
        if any(e.get("loc", [""])[0] == "path" for e in errors):
            return await app_error(request, NotFound(f"there is no page {path}"))
        first = errors[0] if errors else {}
        return await app_error(request, Invalid(f"{'.'.join(map(str, first.get('loc', [])[1:]))}: {first.get('msg')}"))

    app.add_exception_handler(mlflow.MlflowError, mlflow.error_response)  # MLflow's own error shape

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        """Starlette's own errors (a path no route serves): JSON for the API, a page for a browser."""
        path = route_path(request.scope)
        if exc.status_code == 404 and not (is_api(path) or path.startswith("/static/")):
            return await app_error(request, NotFound(f"there is no page {path}"))
        return await http_exception_handler(request, exc)

    for router in (reports.router, foreign_runs.router, runs.router, inside.router, groups.router, export.router, events.router, benchmarks.router,
                   sweeps.router, catalog.router, catalog.health_router, pages.router, sweep_pages.router, inside_pages.router, notes.router,
                   group_pages.router, login.router, api_docs.router, mlflow.router, mlflow.artifacts, mlflow.unserved,
                   wandb.router):
        app.include_router(router)  # reports before runs: /api/runs/reported, /api/runs/import-foreign are no run ids
    app.mount("/static", CachedStaticFiles(directory=STATIC), name="static")
    return app


def warm_up() -> None:
    """Done beside start-up, not in the first requests: every object alive is frozen out of the garbage
    collector. A full collection had to walk them all (torch's ~400,000 among them, when the app imported
    it at start-up), stalling every request for ~0.4 s now and then (the spikes of
    benchmarks/bench_load.py's p99).
    """
    gc.collect()
    gc.freeze()


def json_safe(value: object) -> object:
    """``value`` with every non-finite float replaced by its text (``nan``, ``inf``) and every
    string that UTF-8 cannot hold (a lone surrogate) escaped (``\\udcff``)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    return value
