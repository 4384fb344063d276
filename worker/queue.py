"""The run queue in the database: which run a worker takes next, and which runs' jobs died.

Claiming locks candidate rows with ``SELECT ... FOR UPDATE SKIP LOCKED`` (PostgreSQL: workers on
any number of machines skip the rows another worker is claiming) and then takes one with the
lifecycle's compare-and-set (``app.services.lifecycle.claim``: ``UPDATE ... WHERE id = ? AND status =
'queued'``; on SQLite, which has no row locks and serialises writers, this is what decides): exactly
one worker takes each run.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlmodel import Session, col, select

from app.models import Pool, Run, RunOrigin, RunStatus, as_utc, utcnow
from app.services.lifecycle import claim, requeue_crashed
from app.settings import Settings

from .registry import gone_owners, process_alive, this_host

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
        .where(Run.status == RunStatus.queued, Run.pool == Pool.local, col(Run.requested_device).in_(device_matches(slot)))
        .order_by(col(Run.id))
        .limit(5)
        .with_for_update(skip_locked=True)
    ).all()
    for run_id in candidates:
        run = claim(session, run_id, worker=worker, host=host, slot=slot)
        if run is not None:
            return run
        session.rollback()  # another worker took it: the next candidate
    return None


def reap_dead_runs(session: Session, *, worker: str, own: bool, settings: Settings) -> list[int]:
    """Mark crashed the running runs whose job is provably gone; re-queue those whose ``resume`` is on.

    Gone: its heartbeat is older than ``stale_after_sec``, or its worker is (stopped, or its process
    dead on this host: see :mod:`worker.registry`). ``own=True`` (at start-up under a name whose
    previous holder is gone) also takes every running run of this worker name. A run whose job is
    alive and beating is never taken, whoever else starts: nor is one whose worker died but whose job
    still runs here (told of it by ``worker/parent.py``, it stops at its next step boundary and puts the
    run back in the queue itself).
    """
    cutoff = utcnow() - timedelta(seconds=settings.stale_after_sec)
    # runs trained elsewhere (reported, Slurm) have no job here: their trainer's reports are their heartbeat
    running = session.exec(select(Run).where(Run.status == RunStatus.running, Run.origin == RunOrigin.dashboard,
                                             Run.pool == Pool.local)).all()
    gone = gone_owners(session, {r.worker for r in running if r.worker}, me=worker)
    reaped = []
    for run in running:
        stale = run.heartbeat_at is None or as_utc(run.heartbeat_at) < cutoff
        if not (stale or run.worker in gone or (own and run.worker == worker)):
            continue
        if not stale and run.pid is not None and run.worker_host == this_host() and process_alive(run.pid):
            continue  # its job outlived its worker for a moment: it re-queues the run on its own
        why = "stopped hearing from the job" if stale else "is gone"
        message = f"worker {run.worker} {why} (last heartbeat {run.heartbeat_at})"
        requeue_crashed(session, run, message=message, settings=settings)
        reaped.append(run.id)
        log.warning("run %s crashed: %s", run.id, message)
    session.commit()
    return reaped

