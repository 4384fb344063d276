"""W&B-style scripts' runs (``RunOrigin.wandb``), as the drop-in ``wandb`` module the dashboard ships sends them
(``tinygpt/wandb_dropin/wandb``): a project is a group of runs, ``wandb.config`` the run's config, each
``wandb.log`` dict a row of values kept by name and mapped onto the run's columns (app/services/foreign_runs.py),
``wandb.summary`` its client tags (``summary.<key>``), ``wandb.finish`` its end. Unlike MLflow's client, the drop-in
reads every answer: a cancel reaches the script (as Ctrl-C would). Status changes go through lifecycle.py."""

from __future__ import annotations

from sqlmodel import Session, select

from tinygpt.metric_names import row_step, steps_of

from ..errors import Conflict, NotFound
from ..models import EventType, Run, RunOrigin, RunStatus, utcnow
from ..models.mlflow import TAG_VALUE_MAX
from ..models.wandb import WandbFinish, WandbLog, WandbRunCreate
from ..settings import Settings
from .events import record_event
from .foreign_runs import record_live_values
from .groups import named_group
from .lifecycle import change_status, new_run
from .mlflow_tracking import MAX_TAGS, moment

SUMMARY_PREFIX = "summary."


def create_run(session: Session, *, body: WandbRunCreate, settings: Settings) -> tuple[Run, bool]:
    """The run ``wandb.init`` starts (the same ``client_id`` again: that run; running again if it ended crashed
    for its silence, refused if it ended otherwise), and whether it is new; commits."""
    known = session.exec(select(Run).where(Run.report_id == body.client_id, Run.origin == RunOrigin.wandb)).first()
    if known is not None:
        if not resumed(session, known, settings=settings) and known.status != RunStatus.running:
            raise Conflict(f"run {known.id} ({body.client_id}) has already finished ({known.status}): start a new "
                           "run (another id)")
        known.heartbeat_at = utcnow()
        session.add(known)
        session.commit()
        return known, False
    group = named_group(session, name=body.project)
    config = {**body.config, "steps": steps_of(body.config) or 0}
    run = new_run(session, name=body.name or f"{body.project} {body.client_id[:8]}", config=config,
                  settings=settings, origin=RunOrigin.wandb, status=RunStatus.running, report_id=body.client_id,
                  group_id=group.id, tags=body.tags, notes=body.notes or "", started_at=moment(body.start_time * 1000),
                  heartbeat_at=utcnow(), worker_host=body.host, client_tags={"program": body.program or ""})
    record_event(session, run_id=run.id, type=EventType.log, data={
        "message": f"reported by a W&B-style script, project {body.project!r}" + (
            f", {body.program} on {body.host}" if body.program and body.host else "")})
    session.commit()
    return run, True


def resumed(session: Session, run: Run, *, settings: Settings) -> bool:
    """A run that ended crashed for its silence runs again (its script was only slow); whether it did."""
    if run.status != RunStatus.crashed:
        return False
    change_status(session, run, RunStatus.running, settings=settings, finished_at=None, error=None)
    return True


def wandb_run(session: Session, *, run_id: int) -> Run:
    run = session.get(Run, run_id)
    if run is None or run.origin != RunOrigin.wandb:
        raise NotFound(f"run {run_id} is not a W&B-style run of this dashboard")
    return run


def log(session: Session, *, run_id: int, body: WandbLog, settings: Settings) -> Run:
    """Rows, config and summary changes; a run that ended crashed for its silence runs again. Commits."""
    run = wandb_run(session, run_id=run_id)
    if not resumed(session, run, settings=settings) and RunStatus(run.status).finished and (body.rows or body.config or body.summary):
        raise Conflict(f"run {run_id} has already finished ({run.status}): call wandb.init again to log more")
    if body.config:
        config = {**run.config, **body.config}
        run.config = {**config, "steps": steps_of(config) or config.get("steps", 0)}
    if body.summary:
        set_summary(run, body.summary)
    points = [{"name": name, "step": row_step(row.values, row.step), "value": value, "wall_time": row.time}
              for row in body.rows for name, value in row.values.items()]
    if points:
        record_live_values(session, run, points=points, settings=settings)
    run.heartbeat_at = utcnow()
    session.add(run)
    session.commit()
    return run


def set_summary(run: Run, summary: dict) -> None:
    tags = {**(run.client_tags or {}),
            **{f"{SUMMARY_PREFIX}{k}": str(v)[:TAG_VALUE_MAX] for k, v in summary.items()}}
    if len(tags) > MAX_TAGS:
        raise Conflict(f"a run holds at most {MAX_TAGS} summary values")
    run.client_tags = tags


def finish(session: Session, *, run_id: int, body: WandbFinish, settings: Settings) -> Run:
    """``wandb.finish``: succeeded on exit code 0, cancelled when it was asked to stop, else failed. An ended
    run stays as it ended (a second finish, from the script's exit after its own). Commits."""
    run = wandb_run(session, run_id=run_id)
    if not RunStatus(run.status).finished:
        if run.cancel_requested:
            status, error = RunStatus.cancelled, None
        elif body.exit_code == 0:
            status, error = RunStatus.succeeded, None
        else:
            status, error = RunStatus.failed, f"its script exited with code {body.exit_code}"
        change_status(session, run, status, settings=settings, finished_at=moment(body.end_time * 1000), error=error)
    run.heartbeat_at = utcnow()
    session.add(run)
    session.commit()
    return run
