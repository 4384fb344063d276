"""MLflow's tracking protocol translated into this dashboard's runs (``RunOrigin.mlflow``): an experiment is a
group of runs (its id the group's, ``0`` the Default one), a run is a run (its MLflow id is ``report_id``), params
are its config, tags its client tags, metrics its series by name, the names that mean a run column filling its
rows as they come (app/services/foreign_runs.py). Status changes go through app/services/lifecycle.py.
Errors are MLflow's: ``MlflowError`` carries its ``error_code``."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime

from sqlmodel import Session, col, func, select

from tinygpt.metric_names import STEP_COUNT_NAMES, steps_of

from ..errors import AppError
from ..models import EventType, Run, RunGroup, RunOrigin, RunStatus, SeriesPoint, as_utc, utcnow
from ..models.mlflow import (
    MAX_RESULTS,
    CreateExperiment,
    CreateRun,
    KeyValue,
    LogBatch,
    ParamIn,
    SearchExperiments,
    SearchRuns,
    UpdateRun,
)
from ..models.reports import MAX_PARAMS
from ..settings import Settings
from .events import record_event
from .foreign_runs import record_live_values
from .groups import add_group, next_group_number
from .lifecycle import change_status, new_run

DEFAULT_EXPERIMENT = ("0", "Default")
#: MLflow's run statuses and ours, both ways.
STATUS_OF = {"RUNNING": RunStatus.running, "FINISHED": RunStatus.succeeded, "FAILED": RunStatus.failed,
             "KILLED": RunStatus.cancelled}
MLFLOW_STATUS = {RunStatus.running: "RUNNING", RunStatus.succeeded: "FINISHED", RunStatus.failed: "FAILED",
                 RunStatus.cancelled: "KILLED", RunStatus.crashed: "FAILED", RunStatus.queued: "SCHEDULED",
                 RunStatus.pruned: "KILLED"}
MAX_TAGS = 1000


class MlflowError(AppError):
    """An error as MLflow answers it: ``{"error_code": ..., "message": ...}`` with its status."""

    def __init__(self, error_code: str, message: str, *, status_code: int = 400) -> None:
        super().__init__(message, status_code=status_code)
        self.error_code = error_code


def not_found(message: str) -> MlflowError:
    return MlflowError("RESOURCE_DOES_NOT_EXIST", message, status_code=404)


def invalid(message: str) -> MlflowError:
    return MlflowError("INVALID_PARAMETER_VALUE", message)


def millis(moment: datetime | None) -> int | None:
    return None if moment is None else int(as_utc(moment).timestamp() * 1000)


def moment(ms: int | None) -> datetime:
    return utcnow() if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


# -- experiments: groups of runs ---------------------------------------------------------------------------
def experiment_public(group: RunGroup) -> dict:
    created = millis(group.created_at)
    return {"experiment_id": group.id, "name": group.name, "artifact_location": f"mlflow-artifacts:/{group.id}",
            "lifecycle_stage": "active", "creation_time": created, "last_update_time": created, "tags": []}


def default_experiment(session: Session) -> RunGroup:
    group = session.get(RunGroup, DEFAULT_EXPERIMENT[0])
    return group or add_group(session, group_id=DEFAULT_EXPERIMENT[0], name=DEFAULT_EXPERIMENT[1])


def experiment_by_name(session: Session, *, name: str) -> RunGroup:
    if name == DEFAULT_EXPERIMENT[1]:
        return default_experiment(session)
    group = session.exec(select(RunGroup).where(RunGroup.name == name).order_by(col(RunGroup.created_at))).first()
    if group is None:
        raise not_found(f"Could not find experiment with name '{name}'")
    return group


def experiment(session: Session, *, experiment_id: str) -> RunGroup:
    if experiment_id == DEFAULT_EXPERIMENT[0]:
        return default_experiment(session)
    group = session.get(RunGroup, experiment_id)
    if group is None:
        raise not_found(f"No Experiment with id={experiment_id} exists")
    return group


def create_experiment(session: Session, *, body: CreateExperiment) -> str:
    if body.name == DEFAULT_EXPERIMENT[1] or session.exec(select(RunGroup).where(RunGroup.name == body.name)).first():
        raise MlflowError("RESOURCE_ALREADY_EXISTS", f"Experiment '{body.name}' already exists.")
    group = add_group(session, group_id=next_group_number(session), name=body.name)
    session.commit()
    return group.id


def search_experiments(session: Session, *, body: SearchExperiments) -> list[dict]:
    default_experiment(session)
    groups = session.exec(select(RunGroup).order_by(col(RunGroup.created_at).desc()).limit(body.max_results)).all()
    session.commit()
    return [experiment_public(g) for g in groups]


# -- runs ----------------------------------------------------------------------------------------------------
def tracked_run(session: Session, *, run_id: str) -> Run:
    run = session.exec(select(Run).where(Run.report_id == run_id, Run.origin == RunOrigin.mlflow)).first()
    if run is None:
        raise not_found(f"Run '{run_id}' not found")
    return run


def run_public(session: Session, run: Run) -> dict:
    """A run as MLflow's ``Run``: its info, and its data (latest metric of each name, params, tags)."""
    latest = (select(SeriesPoint.name, func.max(SeriesPoint.step).label("step"))
              .where(SeriesPoint.run_id == run.id).group_by(col(SeriesPoint.name)).subquery())
    last = session.exec(select(SeriesPoint).join(latest, (col(SeriesPoint.name) == latest.c.name)
                                                 & (col(SeriesPoint.step) == latest.c.step))
                        .where(SeriesPoint.run_id == run.id).order_by(col(SeriesPoint.name))).all()
    tags = run.client_tags or {}
    info = {"run_id": run.report_id, "run_uuid": run.report_id, "run_name": run.name,
            "experiment_id": run.group_id or DEFAULT_EXPERIMENT[0], "user_id": tags.get("mlflow.user", ""),
            "status": MLFLOW_STATUS[RunStatus(run.status)], "start_time": millis(run.started_at),
            "artifact_uri": f"mlflow-artifacts:/{run.group_id or '0'}/{run.report_id}/artifacts",
            "lifecycle_stage": "active"}
    if run.finished_at is not None:
        info["end_time"] = millis(run.finished_at)
    data = {"metrics": [metric_public(p) for p in last],  # each name's value at its latest step
            "params": [{"key": k, "value": str(v)} for k, v in run.config.items() if k != "steps"],
            "tags": [{"key": k, "value": v} for k, v in tags.items()]}
    return {"info": info, "data": data}


def metric_public(point: SeriesPoint) -> dict:
    """A value as MLflow's JSON has it: NaN and infinities as the strings protobuf's JSON writes."""
    value = point.logged_value
    shown: float | str = value if math.isfinite(value) else "NaN" if math.isnan(value) else \
        ("Infinity" if value > 0 else "-Infinity")
    return {"key": point.name, "value": shown, "timestamp": int((point.wall_time or 0) * 1000), "step": point.step}


def create_run(session: Session, *, body: CreateRun, settings: Settings) -> Run:
    group = experiment(session, experiment_id=body.experiment_id)
    tags = {t.key: t.value for t in body.tags}
    name = body.run_name or tags.get("mlflow.runName") or f"mlflow run {uuid.uuid4().hex[:8]}"
    tags.setdefault("mlflow.runName", name)
    if body.user_id:
        tags.setdefault("mlflow.user", body.user_id)
    run = new_run(session, name=name, config={"steps": 0}, settings=settings, origin=RunOrigin.mlflow,
                  status=RunStatus.running, report_id=uuid.uuid4().hex, group_id=group.id,
                  started_at=moment(body.start_time), heartbeat_at=utcnow(), client_tags=tags,
                  worker_host=tags.get("mlflow.source.name"))
    record_event(session, run_id=run.id, type=EventType.log, data={
        "message": f"reported by MLflow's client, experiment {group.name!r}" + (
            f", from {tags['mlflow.source.name']}" if tags.get("mlflow.source.name") else "")})
    session.commit()
    return run


def update_run(session: Session, *, body: UpdateRun, settings: Settings) -> Run:
    run = tracked_run(session, run_id=body.ref())
    if body.run_name:
        run.name = body.run_name
        run.client_tags = {**(run.client_tags or {}), "mlflow.runName": body.run_name}
    if body.status is not None:
        if body.status not in STATUS_OF:
            raise invalid(f"Invalid run status '{body.status}': one of {', '.join(STATUS_OF)}")
        status = STATUS_OF[body.status]
        if status != run.status and not RunStatus(run.status).finished:  # an ended run stays as it ended
            change_status(session, run, status, settings=settings, finished_at=moment(body.end_time),
                          error="its script ended it FAILED" if status == RunStatus.failed else None)
    run.heartbeat_at = utcnow()
    session.add(run)
    session.commit()
    return run


def log_batch(session: Session, *, body: LogBatch, settings: Settings) -> None:
    """Params, tags and metrics at once (what every log call of the client comes down to); commits."""
    run = tracked_run(session, run_id=body.ref())
    if run.status == RunStatus.crashed:  # ended for its silence: it was only slow
        change_status(session, run, RunStatus.running, settings=settings, finished_at=None, error=None)
    if body.params:
        log_params(run, body.params)
    if body.tags:
        set_tags(run, body.tags)
    if body.metrics:
        points = [{"name": m.key, "step": m.step, "value": m.value, "wall_time": m.timestamp / 1000}
                  for m in body.metrics]
        record_live_values(session, run, points=points, settings=settings)
    run.heartbeat_at = utcnow()
    session.add(run)
    session.commit()


def log_params(run: Run, params: list[ParamIn]) -> None:
    """MLflow's params are fixed once logged: the same value again is nothing, another is refused."""
    config = dict(run.config)
    for p in params:
        if p.key in config and p.key != "steps" and str(config[p.key]) != p.value:
            raise invalid(f"Changing param values is not allowed. Param with key='{p.key}' was already logged "
                          f"with value='{config[p.key]}' for run ID='{run.report_id}'. Attempted logging new value "
                          f"'{p.value}'.")
        config[p.key] = p.value
    if len(config) > MAX_PARAMS + 1:
        raise invalid(f"a run holds at most {MAX_PARAMS} params")
    steps = planned_steps(config)
    run.config = {**config, "steps": steps}


def planned_steps(config: dict) -> int:
    """What the pages count to: a param that counts the steps (``steps`` itself is the dashboard's, not a param)."""
    steps = steps_of(config, names=tuple(n for n in STEP_COUNT_NAMES if n != "steps"))
    return int(config.get("steps", 0)) if steps is None else steps


def set_tags(run: Run, tags: list[KeyValue]) -> None:
    merged = {**(run.client_tags or {}), **{t.key: t.value for t in tags}}
    if len(merged) > MAX_TAGS:
        raise invalid(f"a run holds at most {MAX_TAGS} tags")
    run.client_tags = merged
    if "mlflow.runName" in merged:
        run.name = merged["mlflow.runName"][:200]


def page_offset(token: str | None) -> int:
    if not token:
        return 0
    if not token.isdigit():
        raise invalid(f"Invalid page token '{token}'")
    return int(token)


def search_runs(session: Session, *, body: SearchRuns) -> tuple[list[dict], str | None]:
    """The runs of the experiments, newest first, a page of at most ``MAX_RESULTS`` (the token: the next page's
    offset). A filter string is refused (not read here), never ignored."""
    if body.filter:
        raise invalid("this server does not filter runs (search without a filter string)")
    stmt = select(Run).where(Run.origin == RunOrigin.mlflow)
    if body.experiment_ids:
        stmt = stmt.where(col(Run.group_id).in_(body.experiment_ids))
    offset, size = page_offset(body.page_token), min(body.max_results, MAX_RESULTS)
    runs = session.exec(stmt.order_by(col(Run.id).desc()).offset(offset).limit(size + 1)).all()
    token = str(offset + size) if len(runs) > size else None
    return [run_public(session, r) for r in runs[:size]], token


def metric_history(session: Session, *, run_id: str, key: str, page_token: str | None,
                   max_results: int) -> tuple[list[dict], str | None]:
    """Every value of one name, in step order, a page at a time (the token: the offset of the next page)."""
    run = tracked_run(session, run_id=run_id)
    offset = page_offset(page_token)
    points = session.exec(select(SeriesPoint).where(SeriesPoint.run_id == run.id, SeriesPoint.name == key)
                          .order_by(col(SeriesPoint.step)).offset(offset).limit(max_results + 1)).all()
    more = len(points) > max_results
    return [metric_public(p) for p in points[:max_results]], str(offset + max_results) if more else None
