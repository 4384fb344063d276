"""Server-sent event streams, read from the events table.

Each event carries its table id as the SSE id, so a client reconnecting with
``Last-Event-ID`` gets exactly the events it missed. A run's stream ends with an
``end`` event once the run has finished and every event before it was sent.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from sse_starlette import EventSourceResponse
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from ..db import session_scope
from ..deps import RunId, SweepId
from ..errors import Invalid, TooManyRequests
from ..models import FINISHED, MAX_INT64, SWEEP_ENDED, Event, EventType
from ..services.events import (
    RUN_LIST_TYPES,
    list_events_after,
    run_events_after,
    sweep_events_after,
    trimmed_beyond,
)
from ..services.runs import get_run
from ..services.sweeps import get_sweep
from ..settings import Settings

router = APIRouter(prefix="/api", tags=["events"])


#: ``after``: the query's form of the cursor (for clients that cannot set ``Last-Event-ID``).
After = Annotated[int | None, Query(ge=0, le=MAX_INT64, description="resume after this event id (as "
                                    "`Last-Event-ID`)")]


def parse_last_id(header: str | None, query: int | None) -> int:
    """The stream's cursor: ``Last-Event-ID`` (a browser's reconnection), else ``after``; a 422 past 64 bits."""
    if header and header.strip().isdigit():
        value = int(header.strip())
        if value > MAX_INT64:
            raise Invalid(f"Last-Event-ID must be at most {MAX_INT64}", field="Last-Event-ID")
        return value
    return query or 0


def as_sse(event: Event) -> dict:
    return {"id": str(event.id), "event": event.type, "data": json.dumps({"run_id": event.run_id, **event.data})}


DB_PAGE = 1000


def fetcher(settings: Settings, query: Callable[..., list[Event]], **kwargs: object) -> Callable[[int], list[Event]]:
    def fetch(after: int) -> list[Event]:
        with session_scope(settings) as s:
            return query(s, after_id=after, limit=DB_PAGE, **kwargs)

    return fetch


def run_ended(event: Event) -> bool | None:
    """Whether the run has ended as of this event; None: the event says nothing about it (events logged after
    the last status, such as an MLflow artifact's log line, keep the stream's verdict)."""
    return event.data.get("status") in FINISHED if event.type == EventType.status else None


def sweep_ended(event: Event) -> bool | None:
    return event.data.get("status") in SWEEP_ENDED if event.type == EventType.sweep else None


async def stream(
    request: Request, fetch: Callable[[int], list[Event]], keep: Callable[[Event], bool], last_id: int,
    ends: Callable[[Event], bool | None] | None, gap: Callable[[int], int | None] | None = None,
) -> AsyncIterator[dict]:
    """Events after ``last_id``: from the database to catch up, then from the hub's memory; an
    ``end`` event after the one that ``ends`` recognises (a stream without ``ends`` never ends).
    ``gap``, asked after each read from the database, says whether events after the cursor were deleted
    (a trimmed outbox): then the stream sends ``gap`` and ends, and the client reads the history again.

    ``cursor`` is the id up to which every matching event has been sent; it moves past other
    runs' events too, so a quiet run's stream does not fall back to the database.
    """
    hub = request.app.state.hub
    settings = request.app.state.settings
    cursor = last_id
    async with hub.listening():
        while True:
            seen = hub.latest
            events = hub.events_after(cursor, keep)
            if events is None:
                events = await run_in_threadpool(fetch, cursor)
                full_page = len(events) >= DB_PAGE
                trimmed = gap and await run_in_threadpool(gap, cursor)  # read after the events: never missed
                if trimmed:
                    yield {"event": "gap", "data": json.dumps({"trimmed_to": trimmed, "after": cursor})}
                    return
            else:
                full_page = False
            finished = False
            for event in events:
                yield as_sse(event)
                verdict = ends(event) if ends is not None else None
                finished = finished if verdict is None else verdict
            if full_page:  # more waiting in the database: read on from the last one sent
                cursor = events[-1].id
            else:  # every matching event up to `seen` has been sent
                cursor = max(cursor, seen, events[-1].id if events else 0)
            if finished:
                yield {"event": "end", "data": json.dumps({"last_event_id": events[-1].id})}
                return
            if await request.is_disconnected():
                return
            if not full_page:
                await hub.wait_past(seen, settings.keepalive_sec)


class StreamCounter:
    """Open event streams per client address, capped at ``TINYGPT_MAX_STREAMS_PER_CLIENT``, and on the whole
    app, capped at ``TINYGPT_MAX_STREAMS``. A client's address is the connection's own, or what a proxy named
    in ``TINYGPT_FORWARDED_ALLOW_IPS`` says it is."""

    def __init__(self) -> None:
        self.open: dict[str, int] = {}
        self.total = 0

    def acquire(self, client: str, limit: int, total_limit: int) -> None:
        if self.total >= total_limit:
            raise TooManyRequests(f"too many open event streams on this dashboard (limit {total_limit}); "
                                  "try again later")
        if self.open.get(client, 0) >= limit:
            raise TooManyRequests(f"too many open event streams from {client} (limit {limit}); close some first")
        self.open[client] = self.open.get(client, 0) + 1
        self.total += 1

    def release(self, client: str) -> None:
        self.total -= 1
        self.open[client] -= 1
        if not self.open[client]:
            del self.open[client]


class StreamSlot:
    """One of a client's stream slots, given back once (by the stream's end or the response's)."""

    def __init__(self, counter: StreamCounter, client: str) -> None:
        self.counter, self.client, self.held = counter, client, True

    def release(self) -> None:
        if self.held:
            self.held = False
            self.counter.release(self.client)


async def holding(slot: StreamSlot, events: AsyncIterator[dict]) -> AsyncIterator[dict]:
    try:
        async for event in events:
            yield event
    finally:
        slot.release()


def open_stream(request: Request, events: AsyncIterator[dict]) -> EventSourceResponse:
    """Take one of the client's stream slots now (429 when it has none left); give it back when
    the stream ends, or when the response does (a client gone before the stream started)."""
    counter: StreamCounter = request.app.state.streams
    client = request.client.host if request.client else "unknown"
    settings = request.app.state.settings
    counter.acquire(client, settings.max_streams_per_client, settings.max_streams)
    slot = StreamSlot(counter, client)
    return EventSourceResponse(holding(slot, events), ping=request.app.state.settings.keepalive_sec,
                               background=BackgroundTask(slot.release))


def check_run_exists(run_id: RunId, settings: Settings) -> None:
    with session_scope(settings) as s:
        get_run(s, run_id=run_id)  # 404 for an unknown run


def gap_finder(settings: Settings, run_id: int, history: int) -> Callable[[int], int | None]:
    def gap(cursor: int) -> int | None:
        with session_scope(settings) as s:
            return trimmed_beyond(s, run_id=run_id, after_id=max(cursor, history))

    return gap


@router.get("/runs/{run_id}/events")
async def run_events(
    run_id: RunId, request: Request, last_event_id: Annotated[str | None, Header(max_length=100)] = None, after: After = None,
    history: Annotated[int, Query(ge=0, le=MAX_INT64, description="the `last_event_id` of the metrics history the client holds "
                                  "(`GET /api/runs/{id}/metrics?format=columns`): no metric event up to it is sent")] = 0,
) -> EventSourceResponse:
    """``status``, ``metric``, ``sample``, ``log`` (...) events of one run, then ``end`` when it has finished.

    Metric events stay in the outbox for ``TINYGPT_EVENT_WINDOW_SEC`` only (``app/services/outbox.py``): a page
    reads the history first and streams from there (``history``). If rows the
    client has not seen are no longer in the outbox, the stream sends ``gap`` and ends: read the history again,
    then stream with ``after`` = the last event id received and the new ``history``.
    (No session dependency here: a stream would hold its database connection for as long as it is open.)
    """
    settings = request.app.state.settings
    await run_in_threadpool(check_run_exists, run_id, settings)
    fetch = fetcher(settings, run_events_after, run_id=run_id, history=history)
    keep = lambda e: e.run_id == run_id and (e.type != EventType.metric or e.id > history)  # noqa: E731
    gen = stream(request, fetch, keep, parse_last_id(last_event_id, after), ends=run_ended,
                 gap=gap_finder(settings, run_id, history))
    return open_stream(request, gen)


@router.get("/events")
async def all_events(
    request: Request, last_event_id: Annotated[str | None, Header(max_length=100)] = None, after: After = None,
) -> EventSourceResponse:
    """Run-list changes: ``created`` and ``status`` events of every run."""
    fetch = fetcher(request.app.state.settings, list_events_after)
    keep = lambda e: e.type in RUN_LIST_TYPES  # noqa: E731
    return open_stream(request, stream(request, fetch, keep, parse_last_id(last_event_id, after), ends=None))


def check_sweep_exists(sweep_id: SweepId, settings: Settings) -> None:
    with session_scope(settings) as s:
        get_sweep(s, sweep_id=sweep_id)  # 404 for an unknown sweep


@router.get("/sweeps/{sweep_id}/events")
async def sweep_events(
    sweep_id: SweepId, request: Request, last_event_id: Annotated[str | None, Header(max_length=100)] = None,
    after: After = None,
) -> EventSourceResponse:
    """``trial`` events of one sweep (kind ``created``, ``evaluated``, ``pruned``, ``finished``, with the trial's
    run id) and ``sweep`` (its end), then ``end``."""
    await run_in_threadpool(check_sweep_exists, sweep_id, request.app.state.settings)
    fetch = fetcher(request.app.state.settings, sweep_events_after, sweep_id=sweep_id)
    gen = stream(request, fetch, lambda e: e.sweep_id == sweep_id, parse_last_id(last_event_id, after),
                 ends=sweep_ended)
    return open_stream(request, gen)
