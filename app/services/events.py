"""The event outbox: written in the same transaction as the change it reports, read by the SSE streams."""

from __future__ import annotations

from sqlalchemy import func, or_
from sqlmodel import Session, col, select

from ..models import Event, EventType, Run

RUN_LIST_TYPES = (EventType.created, EventType.status)


def record_event(session: Session, *, run_id: int | None, type: EventType, data: dict,
                 sweep_id: int | None = None) -> Event:
    """A run's event (``run_id``), or a sweep's (``sweep_id``, with the trial's run id in ``data``)."""
    event = Event(run_id=run_id, sweep_id=sweep_id, type=type, data=data)
    session.add(event)
    return event


def run_events_after(session: Session, *, run_id: int, after_id: int, limit: int = 1000,
                     history: int = 0) -> list[Event]:
    """The run's events after ``after_id``, but for its metric events up to ``history`` (a page that read its
    metrics history up to that event has those rows)."""
    stmt = (
        select(Event).where(Event.run_id == run_id, col(Event.id) > after_id,
                            or_(col(Event.type) != EventType.metric, col(Event.id) > history))
        .order_by(col(Event.id)).limit(limit)
    )
    return list(session.exec(stmt))


def trimmed_beyond(session: Session, *, run_id: int, after_id: int) -> int | None:
    """The newest of the run's metric events deleted from the outbox, if it is newer than ``after_id`` (a client
    there has missed rows the stream can no longer send), else None."""
    trimmed = session.exec(select(Run.events_trimmed_to).where(Run.id == run_id)).first() or 0
    return trimmed if trimmed > after_id else None


def last_run_event_id(session: Session, *, run_id: int) -> int:
    return session.exec(select(func.max(Event.id)).where(Event.run_id == run_id)).one() or 0


def history_event_id(session: Session, *, run: Run) -> int:
    """The event a metrics history read now stands for: the run's newest event, or the newest metric event the
    outbox deleted if that is later (the history holds its row; a stream from an older id would send ``gap``
    again and again)."""
    return max(last_run_event_id(session, run_id=run.id), run.events_trimmed_to)


def sweep_events_after(session: Session, *, sweep_id: int, after_id: int, limit: int = 1000) -> list[Event]:
    stmt = (
        select(Event).where(Event.sweep_id == sweep_id, col(Event.id) > after_id).order_by(col(Event.id)).limit(limit)
    )
    return list(session.exec(stmt))


def list_events_after(session: Session, *, after_id: int, limit: int = 1000) -> list[Event]:
    stmt = (
        select(Event)
        .where(col(Event.type).in_([t.value for t in RUN_LIST_TYPES]), col(Event.id) > after_id)
        .order_by(col(Event.id))
        .limit(limit)
    )
    return list(session.exec(stmt))


def latest_event_id(session: Session) -> int:
    last = session.exec(select(Event.id).order_by(col(Event.id).desc()).limit(1)).first()
    return last or 0
