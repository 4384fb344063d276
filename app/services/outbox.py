"""The event outbox stays an outbox: a run's ``metric`` events are there for live pages and their reconnects,
not as a second archive of its metrics (the ``metrics`` table is that).

The app deletes every metric event older than ``TINYGPT_EVENT_WINDOW_SEC`` (``compact_forever``), running runs'
and finished ones' alike, so the database holds one copy of each metric. Each run remembers the newest metric
event it lost (``Run.events_trimmed_to``): a stream whose client is older than that tells it to read the history
again (a ``gap`` event, ``app/api/events.py``), so nothing is lost or shown twice. The live streams read new
events within ``TINYGPT_EVENT_POLL_SEC``, long before they go. Other events (status, samples, logs, alerts) are
few, and stay.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

from anyio import to_thread
from sqlalchemy import delete, func, update
from sqlmodel import Session, col, select

from ..db import session_scope
from ..models import Event, EventType, Run, utcnow
from ..settings import Settings
from .lifecycle import end_silent_clients

log = logging.getLogger(__name__)


def compact_outbox(session: Session, *, written_before: datetime) -> int:
    """Delete the metric events written before ``written_before``; each run they belonged to remembers the
    newest it lost. How many were deleted (commits)."""
    old = (col(Event.type) == EventType.metric) & (col(Event.created_at) < written_before)
    newest = (select(Event.run_id, func.max(Event.id)).where(old).group_by(col(Event.run_id)))
    trimmed = session.exec(newest).all()
    for run_id, newest_id in trimmed:
        session.execute(update(Run).where(col(Run.id) == run_id, col(Run.events_trimmed_to) < newest_id)
                        .values(events_trimmed_to=newest_id))
    gone = session.execute(delete(Event).where(old, col(Event.id) <= max((i for _, i in trimmed), default=0)))
    session.commit()
    return gone.rowcount


def compact_every_sec(settings: Settings) -> float:
    return min(30.0, max(0.5, settings.event_window_sec / 4))


async def compact_forever(settings: Settings) -> None:
    """The app's background task: compact the outbox a few times a window (and end the runs of MLflow clients
    gone silent: app/services/lifecycle.py)."""
    def compact() -> int:
        with session_scope(settings) as session:
            end_silent_clients(session, settings=settings)  # a tick of its own would cost a second loop
            return compact_outbox(session, written_before=utcnow() - timedelta(seconds=settings.event_window_sec))

    while True:
        try:
            await to_thread.run_sync(compact)
        except Exception:
            log.exception("compacting the event outbox failed; retrying")
        await asyncio.sleep(compact_every_sec(settings))
