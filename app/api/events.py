"""Server-sent event streams, read from the events table.

Each event carries its table id as the SSE id, so a client reconnecting with
``Last-Event-ID`` gets exactly the events it missed. A run's stream ends with an
``end`` event once the run has finished and every event before it was sent.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Annotated

from fastapi import APIRouter, Header, Request
from sqlmodel import Session
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from ..db import get_engine
from ..deps import SessionDep, SettingsDep
from ..models import FINISHED, Event, EventType
from ..services.events import list_events_after, run_events_after
from ..services.runs import get_run

router = APIRouter(prefix="/api", tags=["events"])


def parse_last_id(header: str | None, query: int | None) -> int:
    if header and header.strip().isdigit():
        return int(header.strip())
    return query or 0


def as_sse(event: Event) -> dict:
    return {"id": str(event.id), "event": event.type, "data": json.dumps({"run_id": event.run_id, **event.data})}


def fetcher(query: Callable[..., list[Event]], **kwargs: object) -> Callable[[int], list[Event]]:
    def fetch(after: int) -> list[Event]:
        with Session(get_engine()) as s:
            return query(s, after_id=after, **kwargs)

    return fetch


async def stream(request: Request, fetch: Callable[[int], list[Event]], last_id: int, ends: bool) -> AsyncIterator[dict]:
    hub = request.app.state.hub
    settings = request.app.state.settings
    while True:
        seen = hub.latest
        events = await run_in_threadpool(fetch, last_id)
        finished = False
        for event in events:
            yield as_sse(event)
            last_id = event.id
            finished = event.type == EventType.status and event.data.get("status") in FINISHED
        if ends and finished:
            yield {"event": "end", "data": json.dumps({"last_event_id": last_id})}
            return
        if await request.is_disconnected():
            return
        if len(events) < 1000:  # otherwise more are waiting: read on at once
            await hub.wait_past(seen, settings.keepalive_sec)


@router.get("/runs/{run_id}/events")
async def run_events(
    run_id: int, request: Request, session: SessionDep, settings: SettingsDep,
    last_event_id: Annotated[str | None, Header()] = None, after: int | None = None,
) -> EventSourceResponse:
    """``status``, ``metric``, ``sample`` and ``log`` events of one run, then ``end`` when it has finished."""
    get_run(session, run_id=run_id)  # 404 for an unknown run
    fetch = fetcher(run_events_after, run_id=run_id)
    gen = stream(request, fetch, parse_last_id(last_event_id, after), ends=True)
    return EventSourceResponse(gen, ping=settings.keepalive_sec)


@router.get("/events")
async def all_events(
    request: Request, settings: SettingsDep,
    last_event_id: Annotated[str | None, Header()] = None, after: int | None = None,
) -> EventSourceResponse:
    """Run-list changes: ``created`` and ``status`` events of every run."""
    fetch = fetcher(list_events_after)
    return EventSourceResponse(stream(request, fetch, parse_last_id(last_event_id, after), ends=False),
                               ping=settings.keepalive_sec)
