"""The run queue in the database: claim a run atomically, and find runs whose job died.

Claiming locks candidate rows with ``SELECT ... FOR UPDATE SKIP LOCKED`` (PostgreSQL: workers on
any number of machines skip the rows another worker is claiming) and then changes the status with
a compare-and-set (``UPDATE ... WHERE id = ? AND status = 'queued'``; on SQLite, which has no row
locks and serialises writers, this is what decides): exactly one worker takes each run.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy import update
from sqlmodel import Session, col, select

from app.models import EventType, Run, RunOrigin, RunStatus, as_utc, utcnow
from app.services.alerts import end_run
from app.services.events import record_event
from app.services.runs import run_summary, set_status
from app.settings import Settings

from .registry import gone_owners

log = logging.getLogger(__name__)


def device_matches(slot: str) -> list[str]:
    """Requested device names a slot may take: itself, 'auto', and 'cuda' for any cuda:N slot."""
    names = [slot, "auto"]
    if slot.startswith("cuda:"):
        names.append("cuda")
    if slot == "cuda":
        names.append("cuda:0")
    return names


def claim_next(session: Session, *, worker: str, host: str, slot: str) -> Run | None:
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
            .values(status=RunStatus.running, worker=worker, worker_host=host, device=slot, started_at=now, heartbeat_at=now,
                    attempt=Run.attempt + 1, cancel_requested=False, error=None, finished_at=None,
                    progress_at=None, step_sec=None, stalled_at=None)
        )
        if result.rowcount == 1:
            run = session.get(Run, run_id)
            session.refresh(run)
            record_event(session, run_id=run_id, type=EventType.status, data={**run_summary(run), "attempt": run.attempt})
            session.commit()
            return run
        session.rollback()
    return None


def reap_dead_runs(session: Session, *, worker: str, own: bool, settings: Settings) -> list[int]:
    """Mark crashed the running runs whose job is provably gone; re-queue those whose ``resume`` is on.

    Gone: its heartbeat is older than ``stale_after_sec``, or its worker is (stopped, or its process
    dead on this host: see :mod:`worker.registry`). ``own=True`` (at start-up under a name whose
    previous holder is gone) also takes every running run of this worker name. A run whose job is
    alive and beating is never taken, whoever else starts.
    """
    cutoff = utcnow() - timedelta(seconds=settings.stale_after_sec)
    # runs trained elsewhere (reported) have no job here: their trainer's reports are their heartbeat
    running = session.exec(select(Run).where(Run.status == RunStatus.running, Run.origin == RunOrigin.dashboard)).all()
    gone = gone_owners(session, {r.worker for r in running if r.worker}, me=worker)
    reaped = []
    for run in running:
        stale = run.heartbeat_at is None or as_utc(run.heartbeat_at) < cutoff
        if not (stale or run.worker in gone or (own and run.worker == worker)):
            continue
        why = "stopped hearing from the job" if stale else "is gone"
        message = f"worker {run.worker} {why} (last heartbeat {run.heartbeat_at})"
        resumes = run.config.get("resume", True) and run.attempt < settings.max_attempts
        end_run(session, run, RunStatus.crashed, settings=settings, error=message, finished_at=utcnow(), pid=None,
                stalled_at=None)
        if resumes:
            set_status(session, run, RunStatus.queued, finished_at=None)
            record_event(session, run_id=run.id, type=EventType.log,
                         data={"message": "re-queued to resume from its last checkpoint"})
        reaped.append(run.id)
        log.warning("run %s crashed: %s", run.id, message)
    session.commit()
    return reaped

