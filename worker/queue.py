"""The run queue in the database: claim a run atomically, and find runs whose job died.

Claiming locks candidate rows with ``SELECT ... FOR UPDATE SKIP LOCKED`` (PostgreSQL: workers on
any number of machines skip the rows another worker is claiming) and then changes the status with
a compare-and-set (``UPDATE ... WHERE id = ? AND status = 'queued'``; on SQLite, which has no row
locks and serialises writers, this is what decides): exactly one worker takes each run.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy import or_, update
from sqlmodel import Session, col, select

from app.models import EventType, Run, RunStatus, utcnow
from app.services.events import record_event
from app.services.runs import run_summary, set_status

log = logging.getLogger(__name__)


def device_matches(slot: str) -> list[str]:
    """Requested device names a slot may take: itself, 'auto', and 'cuda' for any cuda:N slot."""
    names = [slot, "auto"]
    if slot.startswith("cuda:"):
        names.append("cuda")
    if slot == "cuda":
        names.append("cuda:0")
    return names


def claim_next(session: Session, *, worker: str, slot: str) -> Run | None:
    candidates = session.exec(
        select(Run.id)
        .where(Run.status == RunStatus.queued, col(Run.requested_device).in_(device_matches(slot)))
        .order_by(col(Run.id))
        .limit(5)
        .with_for_update(skip_locked=True)
    ).all()
    now = utcnow()
    for run_id in candidates:
        result = session.exec(  # type: ignore[call-overload]
            update(Run)
            .where(col(Run.id) == run_id, col(Run.status) == RunStatus.queued)
            .values(status=RunStatus.running, worker=worker, device=slot, started_at=now, heartbeat_at=now,
                    attempt=Run.attempt + 1, cancel_requested=False, error=None, finished_at=None)
        )
        if result.rowcount == 1:
            run = session.get(Run, run_id)
            session.refresh(run)
            record_event(session, run_id=run_id, type=EventType.status, data={**run_summary(run), "attempt": run.attempt})
            session.commit()
            return run
        session.rollback()
    return None


def reap_dead_runs(
    session: Session, *, worker: str, stale_after_sec: float, own: bool, max_attempts: int = 3
) -> list[int]:
    """Mark crashed the running runs whose job is gone; re-queue those whose ``resume`` is on.

    ``own=True`` (at worker start-up) takes every running run of this worker at once:
    its jobs died with it. Otherwise only runs whose heartbeat is older than ``stale_after_sec``.
    """
    cutoff = utcnow() - timedelta(seconds=stale_after_sec)
    stale = or_(col(Run.heartbeat_at) < cutoff, col(Run.heartbeat_at).is_(None))
    cond = or_(Run.worker == worker, stale) if own else stale
    runs = session.exec(select(Run).where(Run.status == RunStatus.running, cond)).all()
    reaped = []
    for run in runs:
        message = f"worker {run.worker} stopped hearing from the job (last heartbeat {run.heartbeat_at})"
        set_status(session, run, RunStatus.crashed, error=message, finished_at=utcnow(), pid=None)
        if run.config.get("resume", True) and run.attempt < max_attempts:
            set_status(session, run, RunStatus.queued, finished_at=None)
            record_event(session, run_id=run.id, type=EventType.log,
                         data={"message": "re-queued to resume from its last checkpoint"})
        reaped.append(run.id)
        log.warning("run %s crashed: %s", run.id, message)
    session.commit()
    return reaped
