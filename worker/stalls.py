"""Stalled runs: alive but not moving. A job in a deadlock, or stopped with SIGSTOP, keeps its run's
heartbeat (its worker beats for it while its process exists), so the crash check never fires; this
one looks at progress instead: the time of the run's last step, which its job writes with its heartbeat.

A running run with no step for max(``stall_after_sec``, 10 x its median step time) is marked stalled
(``runs.stalled_at``, a ``stall`` event on its stream, a ``stalled`` alert); it clears itself when a
step comes again. The clock starts when training starts (before that: set-up, tokenizer, data).
"""

from __future__ import annotations

import logging
from datetime import datetime

from sqlmodel import Session, select

from app.models import Run, RunStatus, utcnow
from app.services import lifecycle
from app.settings import Settings

from .queue import as_utc

log = logging.getLogger(__name__)

STEP_TIMES = 10  # a stall is this many median steps without one (or stall_after_sec, if longer)


def stall_limit_sec(run: Run, settings: Settings) -> float:
    return max(settings.stall_after_sec, STEP_TIMES * (run.step_sec or 0.0))


def check_stalls(session: Session, *, worker: str, settings: Settings) -> None:
    """Mark stalled, or clear, the running runs of this worker (commits)."""
    now = utcnow()
    runs = session.exec(select(Run).where(Run.status == RunStatus.running, Run.worker == worker)).all()
    for run in runs:
        if run.progress_at is None:
            continue
        moved_at = as_utc(run.progress_at)
        if run.stalled_at is None:
            idle = (now - moved_at).total_seconds()
            if idle > stall_limit_sec(run, settings):
                mark_stalled(session, run, idle, now, settings)
        elif moved_at > as_utc(run.stalled_at):
            clear_stall(session, run, moved_at)
    session.commit()


def mark_stalled(session: Session, run: Run, idle: float, now: datetime, settings: Settings) -> None:
    limit = stall_limit_sec(run, settings)
    median = f"; median step {run.step_sec:.2f} s" if run.step_sec else ""
    message = f"no step for {idle:.0f} s, at step {run.last_step} (limit {limit:.0f} s{median}); its job is alive"
    lifecycle.mark_stalled(session, run, message=message, now=now, settings=settings)
    log.warning("run %s stalled: %s", run.id, message)


def clear_stall(session: Session, run: Run, moved_at: datetime) -> None:
    log.info("run %s: %s", run.id, lifecycle.clear_stall(session, run, moved_at=moved_at))
