"""A run's life, owned here and nowhere else.

Every kind of run is built by :func:`new_run` (a dashboard run, a sweep's trial, a reported run, an imported
one, a benchmark). Every change of a run's status goes through :func:`change_status`, which checks it
against :data:`TRANSITIONS` and does what comes with it: the fields it sets, the figures stored at the end
(the run's median tokens/s), the alert people are sent (before the status: a run's stream ends at its final
status, and carries the alert), and the ``status`` event its streams carry. The named transitions are
functions of their own: :func:`claim` (a worker takes a queued run), :func:`cancel_run`,
:func:`requeue_crashed` (a run whose job died), and marking a run stalled or moving again
(:func:`mark_stalled`, :func:`clear_stall`: a flag on a running run, not a status).

Sweeps sit above runs: they build their trials here, and a trial's end moves its sweep on when its sweep is
settled (``app/services/sweeps.py``): by the worker, right after each job ends and on every heartbeat.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timedelta

from sqlalchemy import update
from sqlmodel import Session, col, select

from ..errors import Conflict, Invalid
from ..models import (
    TRACKING_CLIENTS,
    UNSTOPPABLE,
    Alert,
    EventType,
    Pool,
    Run,
    RunCreate,
    RunKind,
    RunOrigin,
    RunStatus,
    as_utc,
    library_config,
    resolved_options,
    utcnow,
)
from ..settings import Settings
from .alerts import ended_message, raise_alert
from .datasets import check_context_fits, check_dataset_exists, dataset_target
from .devices import check_device_available, check_machine_limits, check_memory_fits
from .events import record_event
from .groups import add_group, group_runs, record_submission, runs_group_name
from .metric_history import median_rate
from .runs import get_run, run_summary

SEED_SUFFIX = re.compile(r" \[seed \d+\]$")  # what add_runs appends to tell a group's seeds apart

Q, RUN, OK, FAIL, CANCEL, CRASH, PRUNE = (RunStatus.queued, RunStatus.running, RunStatus.succeeded, RunStatus.failed,
                                          RunStatus.cancelled, RunStatus.crashed, RunStatus.pruned)
#: Which status may follow which. ``None``: a new run (queued to be trained here; running when it reports from
#: elsewhere; ended when it is imported).
TRANSITIONS: dict[RunStatus | None, frozenset[RunStatus]] = {
    None: frozenset({Q, RUN, OK, FAIL, CANCEL}),
    Q: frozenset({RUN, CANCEL, FAIL}),  # claimed by a worker or started by its Slurm job; cancelled before it
    # started; failed before it started (its Slurm job refused by sbatch, or ended before its trainer reported)
    RUN: frozenset({OK, FAIL, CANCEL, CRASH, PRUNE, Q}),  # its end; or back in the queue (stopped in order)
    CRASH: frozenset({Q}),  # re-queued to resume from its last checkpoint
    OK: frozenset(), FAIL: frozenset(), CANCEL: frozenset(), PRUNE: frozenset(),
}
#: A reported run whose trainer resumes after the run ended (``tinygpt train --resume``) runs again.
REPORTED_RESUMES = frozenset({OK, FAIL, CANCEL})
#: The alert a run's end calls for (none when it was cancelled by someone, or went back to the queue).
END_ALERTS = {OK: Alert.finished, FAIL: Alert.failed, CRASH: Alert.crashed, PRUNE: Alert.pruned}


class IllegalTransition(Conflict):
    """A status change the table does not allow (409: a request that asks for one, such as a cancel of a run
    that ended, gets this)."""


def check_transition(run: Run | None, status: RunStatus) -> None:
    """IllegalTransition unless ``run`` (None: a new run) may go to ``status``."""
    current = None if run is None or run.status is None else RunStatus(run.status)
    if status in TRANSITIONS[current]:
        return
    if run is not None and run.origin == RunOrigin.reported and current in REPORTED_RESUMES and status == RUN:
        return
    if run is not None and run.origin in TRACKING_CLIENTS and current == CRASH and status == RUN:
        return  # a client that went silent (ended crashed) and logs again
    what = f"run {run.id}" if run is not None and run.id is not None else "a new run"
    raise IllegalTransition(f"{what} cannot go from {current or 'nothing'} to {status}")


# -- new runs ---------------------------------------------------------------------------------------
def new_run(session: Session, *, name: str, config: dict, settings: Settings, requested_device: str = "auto",
            kind: RunKind = RunKind.train, origin: RunOrigin = RunOrigin.dashboard, status: RunStatus = Q,
            steps_field: str = "steps", **fields: object) -> Run:
    """A run of any kind with its folder and its ``created`` event (uncommitted: the caller commits). A
    training run's ``steps`` are bounded by ``TINYGPT_MAX_STEPS`` (422 naming ``steps_field``)."""
    if kind == RunKind.train and int(config.get("steps", 0)) > settings.max_steps:
        raise Invalid(f"steps must be at most {settings.max_steps}", field=steps_field)
    check_transition(None, status)
    run = Run(name=name, kind=kind, config=config, requested_device=requested_device, origin=origin, status=status,
              **fields)
    session.add(run)
    session.flush()
    run.out_dir = str(settings.runs_dir / str(run.id))
    record_event(session, run_id=run.id, type=EventType.created, data=run_summary(run))
    if status != Q:  # born running (it reports from elsewhere): its streams see the status as any other
        record_status(session, run)
    return run


def run_pool(body: RunCreate, settings: Settings) -> Pool:
    """The pool a submission goes to (422 naming ``pool`` or ``time_limit`` when it cannot)."""
    pool = Pool(body.pool or settings.default_pool)
    if pool not in settings.pools:
        raise Invalid(f"pool {pool} is not set up on this dashboard (pools: {', '.join(settings.pools)}; "
                      "TINYGPT_SLURM turns the slurm pool on)", field="pool")
    if body.time_limit is not None and pool != Pool.slurm:
        raise Invalid("time_limit applies to the slurm pool only (this run goes to the local workers)",
                      field="time_limit")
    return pool


def check_run(session: Session, *, body: RunCreate, settings: Settings) -> None:
    """What a run's options need of this machine (of the local pool) and its data (the model checks the options
    themselves); a Slurm run's devices are the cluster's, asked of it by its job."""
    if body.steps > settings.max_steps:
        raise Invalid(f"steps must be at most {settings.max_steps}", field="steps")
    settings.receiver_policy.check_run_urls(body.notify.urls)
    devices = body.devices()
    if run_pool(body, settings) == Pool.local:
        for name in devices:
            check_device_available(name)
        check_machine_limits(body, devices)
        check_memory_fits(body, devices, settings)
    check_dataset_exists(session, name=body.dataset)
    model = library_config(body).model_config()
    check_context_fits(session, name=body.dataset, context=model.context, vocab_size=model.vocab_size)


def add_runs(session: Session, *, body: RunCreate, settings: Settings, sweep_id: int | None = None,
             trial: int | None = None, group_id: str | None = None, base_name: str | None = None) -> list[Run]:
    """Queue one run per device and seed of ``body`` (uncommitted: the caller commits), several as one group (or
    ``group_id``'s, named from the submission: :func:`groups.record_submission`); a sweep's trial names its sweep."""
    check_run(session, body=body, settings=settings)
    devices, seeds = body.devices(), body.seed_list()
    config = body.model_dump(mode="json", exclude=set(RunCreate.PLACEMENT))
    # resolved now: what the run means is fixed when it is submitted, whatever a later version's presets say
    resolved = resolved_options(body)
    pool = run_pool(body, settings)
    if config["target_val_loss"] is None:  # its dataset's, shown with the run's options (the job would find it too)
        config["target_val_loss"] = dataset_target(session, name=body.dataset, configured=None)
    group = group_id or (uuid.uuid4().hex[:12] if len(devices) * len(seeds) > 1 else None)
    base = base_name or body.name or f"{body.preset}-{body.dataset}"

    def name(device: str, seed: int) -> str:  # "holmes-holmes [cuda, seed 2]": what tells the group's runs apart
        parts = [device] * (len(devices) > 1) + [f"seed {seed}"] * (len(seeds) > 1 or group_id is not None)
        return f"{base} [{', '.join(parts)}]" if parts else base

    runs = [new_run(session, name=name(device, seed), config={**config, "seed": seed}, settings=settings,
                    resolved_config={**resolved, "seed": seed, "target_val_loss": config["target_val_loss"]},
                    requested_device=device, tags=body.tags, group_id=group, sweep_id=sweep_id, trial=trial,
                    pool=pool, time_limit=body.time_limit)
            for device in devices for seed in seeds]
    if group is not None:  # named from what it is: "tiny-holmes, seeds 1337-1339"
        record_submission(session, group_id=group, base=base, new=runs)
    return runs


def create_runs(session: Session, *, body: RunCreate, settings: Settings) -> list[Run]:
    runs = add_runs(session, body=body, settings=settings)
    session.commit()
    return runs


def repeat_run(session: Session, *, run_id: int, count: int, settings: Settings) -> list[Run]:
    """``count`` more runs of a run's options, each with the next seed its group has not used, in its group (the
    run's first group when it had none): "Run 2 more seeds"."""
    run = get_run(session, run_id=run_id)
    if run.origin != RunOrigin.dashboard or run.kind != RunKind.train:
        raise Conflict(f"run {run_id} was not trained by this dashboard; repeat it where it was trained")
    group = group_runs(session, group_id=run.group_id) if run.group_id else [run]
    first_free = max(int(r.config.get("seed", 0)) for r in group) + 1
    body = RunCreate.model_validate({**run.config, "device": run.requested_device, "tags": run.tags,
                                     "pool": run.pool, "time_limit": run.time_limit,
                                     "seeds": list(range(first_free, first_free + count))})
    base = SEED_SUFFIX.sub("", run.name)
    if run.group_id is None:  # its first group: named from it, then from it and its repeats
        run.group_id = uuid.uuid4().hex[:12]
        session.add(run)
        add_group(session, group_id=run.group_id, name=runs_group_name(base, [run]))
    runs = add_runs(session, body=body, settings=settings, group_id=run.group_id, base_name=base)
    session.commit()
    return runs


# -- changes of status ---------------------------------------------------------------------------------
def change_status(session: Session, run: Run, status: RunStatus, *, settings: Settings, alert: Alert | None = None,
                  **fields: object) -> None:
    """The one way a run's status changes (uncommitted: the caller commits). ``alert``: the one to send when
    it is not the status's own (a NaN loss ends a run ``failed`` with ``nonfinite_loss``)."""
    check_transition(run, status)
    run.status = status
    for key, value in fields.items():
        setattr(run, key, value)
    status = RunStatus(status)
    if status.finished:
        run.tokens_per_sec = median_rate(session, run_id=run.id)
    kind = alert or (Alert.stopped_early if status == OK and run.stop_reason else END_ALERTS.get(status))
    if kind is not None and run.origin != RunOrigin.imported:  # an imported run's end is history, not news
        raise_alert(session, kind=kind, message=ended_message(run, kind), settings=settings, run=run)
    record_status(session, run)


def record_status(session: Session, run: Run) -> None:
    session.add(run)
    session.flush()
    record_event(session, run_id=run.id, type=EventType.status,
                 data={**run_summary(run), "error": run.error, "best_val_loss": run.best_val_loss,
                       "best_step": run.best_step, "last_step": run.last_step, "stop_reason": run.stop_reason})


def claim(session: Session, run_id: int, *, worker: str, host: str, slot: str) -> Run | None:
    """A worker takes a queued run: a compare-and-set (``... WHERE status = 'queued'``), so exactly one of
    the workers trying gets it (commits when it did; None: another was first, and nothing is committed)."""
    now = utcnow()
    taken = session.exec(  # type: ignore[call-overload]
        update(Run)
        .where(col(Run.id) == run_id, col(Run.status) == Q)
        .values(status=RUN, worker=worker, worker_host=host, device=slot, started_at=now, heartbeat_at=now,
                attempt=Run.attempt + 1, cancel_requested=False, error=None, finished_at=None,
                progress_at=None, step_sec=None, stalled_at=None))
    if taken.rowcount != 1:
        return None
    run = session.get(Run, run_id)
    session.refresh(run)
    record_event(session, run_id=run_id, type=EventType.status, data={**run_summary(run), "attempt": run.attempt})
    session.commit()
    return run


def cancel_run(session: Session, *, run_id: int, settings: Settings) -> Run:
    """A queued run, or a reported one whose trainer went silent, ends ``cancelled`` at once; a running one is
    asked to stop (its job or trainer ends it at a step boundary). Commits."""
    run = get_run(session, run_id=run_id)
    if RunStatus(run.status).finished:
        raise Conflict(f"run {run_id} has already finished ({run.status})")
    if run.origin in UNSTOPPABLE:
        raise Conflict(f"run {run_id} reports through MLflow's client, which cannot be asked to stop: stop its "
                       "script (the run ends with it)")
    if run.status == Q:  # a Slurm run's pending job is cancelled by its executor (scancel), told by the flag
        change_status(session, run, CANCEL, settings=settings, finished_at=utcnow(),
                      cancel_requested=run.slurm_job_id is not None)
    elif trainer_is_silent(run, settings):  # a trainer that comes back is told to stop
        change_status(session, run, CANCEL, settings=settings, finished_at=utcnow(), cancel_requested=True,
                      error="cancelled by request while its trainer was not reporting")
    else:
        run.cancel_requested = True
        session.add(run)
        record_event(session, run_id=run.id, type=EventType.log, data={"message": "cancel requested"})
    session.commit()
    session.refresh(run)
    return run


def trainer_is_silent(run: Run, settings: Settings) -> bool:
    """A reported run whose trainer has not reported for ``stale_after_sec``: nobody would see a request
    to stop, so a cancel ends it at once (a trainer that comes back is told it was cancelled)."""
    if run.origin != RunOrigin.reported or run.heartbeat_at is None:
        return False
    return (utcnow() - as_utc(run.heartbeat_at)).total_seconds() > settings.stale_after_sec


def requeue_crashed(session: Session, run: Run, *, message: str, settings: Settings) -> bool:
    """A running run whose job died: ``crashed`` (and its alert), then back in the queue to resume from its
    last checkpoint while ``resume`` is on and attempts remain; whether it was re-queued (uncommitted)."""
    change_status(session, run, CRASH, settings=settings, error=message, finished_at=utcnow(), pid=None,
                  stalled_at=None)
    if not (run.config.get("resume", True) and run.attempt < settings.max_attempts):
        return False
    change_status(session, run, Q, settings=settings, finished_at=None)
    record_event(session, run_id=run.id, type=EventType.log, data={"message": "re-queued to resume from its last checkpoint"})
    return True


# -- stalled: a flag on a running run --------------------------------------------------------------------------
def mark_stalled(session: Session, run: Run, *, message: str, now: datetime, settings: Settings) -> None:
    """No step for too long (``worker/stalls.py`` decides when): the flag, a ``stall`` event and the alert."""
    run.stalled_at = now
    session.add(run)
    record_event(session, run_id=run.id, type=EventType.stall,
                 data={"stalled": True, "since": as_utc(run.progress_at).isoformat(), "step": run.last_step,
                       "message": message})
    raise_alert(session, kind=Alert.stalled, message=message, settings=settings, run=run)


def clear_stall(session: Session, run: Run, *, moved_at: datetime) -> str:
    """Steps come again: the flag goes, with a ``stall`` event and a log line; what the line says."""
    stalled_for = (moved_at - as_utc(run.stalled_at)).total_seconds()
    run.stalled_at = None
    session.add(run)
    message = f"moving again (stalled for {stalled_for:.0f} s more after it was noticed)"
    record_event(session, run_id=run.id, type=EventType.stall, data={"stalled": False, "message": message})
    record_event(session, run_id=run.id, type=EventType.log, data={"message": message})
    return message


def end_silent_clients(session: Session, *, settings: Settings) -> int:
    """Runs reporting through a tracking client (``TRACKING_CLIENTS``) that sent nothing for ``client_silent_sec``
    end crashed (a script killed mid-run never says it ended); how many (commits)."""
    cutoff = utcnow() - timedelta(seconds=settings.client_silent_sec)
    silent = session.exec(select(Run).where(col(Run.origin).in_(list(TRACKING_CLIENTS)), Run.status == RUN,
                                            col(Run.heartbeat_at) < cutoff)).all()
    for run in silent:
        change_status(session, run, CRASH, settings=settings, finished_at=utcnow(),
                      error=f"its {TRACKING_CLIENTS[RunOrigin(run.origin)]} sent nothing for "
                            f"{settings.client_silent_sec:g} s (the script "
                            "stopped without ending the run); a value it logs later resumes it")
    session.commit()
    return len(silent)
