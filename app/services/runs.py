"""Runs as records: read, list, rename and tag, delete (with their files), samples, the best checkpoint.

New runs and every change of status: app/services/lifecycle.py. Metrics: metric_history.py. Devices: devices.py.
Comparisons: compare.py."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from sqlalchemy import Select, bindparam, func
from sqlalchemy import delete as sa_delete
from sqlmodel import Session, col, select

from ..db import saved_changes
from ..errors import Conflict, NotFound
from ..models import (
    BenchmarkResult,
    Event,
    Metric,
    MetricBlock,
    Run,
    RunPublic,
    RunSort,
    RunsPage,
    RunStatus,
    RunUpdate,
    Sample,
    SamplePublic,
)
from ..settings import Settings
from .files import remove_run_folder
from .groups import add_group, group_names

SAMPLE_FIELDS = list(SamplePublic.model_fields)

# The read API's statements are built once and run with parameters: building a statement costs the
# app more than SQLite takes to run it (0.6 ms against 0.3 ms for a run's metrics, measured).
SAMPLES_OF_RUN = (select(*(col(getattr(Sample, f)) for f in SAMPLE_FIELDS))
                  .where(Sample.run_id == bindparam("run_id")).order_by(col(Sample.step), col(Sample.id)))


def run_summary(run: Run) -> dict:
    """What run-list events carry."""
    return {"id": run.id, "name": run.name, "status": run.status, "device": run.device or run.requested_device,
            "worker": run.worker, "worker_host": run.worker_host}


def get_run(session: Session, *, run_id: int) -> Run:
    run = session.get(Run, run_id)
    if run is None:
        raise NotFound(f"run {run_id} does not exist")
    return run


def public_runs(session: Session, runs: list[Run]) -> list[RunPublic]:
    """The runs as the API shows them, each with its group's name."""
    names = group_names(session, group_ids=(r.group_id for r in runs))
    return [RunPublic.of(r, group_name=names.get(r.group_id or "")) for r in runs]


def public_run(session: Session, run: Run) -> RunPublic:
    return public_runs(session, [run])[0]


def list_runs(
    session: Session,
    *,
    status: RunStatus | None = None,
    device: str | None = None,
    tag: str | None = None,
    group: str | None = None,
    worker: str | None = None,
    text: str | None = None,
    stalled: bool = False,
    sort: RunSort = RunSort.newest,
    offset: int = 0,
    limit: int = 50,
) -> RunsPage:
    """One page of runs in ``sort``'s order; ``worker`` matches a worker's name or its host; ``text`` is found
    in a run's name or notes (any case); ``stalled``: only the running runs that are stalled."""
    stmt = runs_query(status=bool(status), device=bool(device), group=bool(group), worker=bool(worker),
                      text=bool(text), stalled=stalled, sort=sort)
    params = {"status": status, "device": device, "group": group, "worker": worker, "offset": offset, "limit": limit,
              "text": like_pattern(text) if text else None}
    if tag:  # tags are a JSON list: filtered here, portable across SQLite and PostgreSQL
        runs = [r for r in session.exec(stmt, params=params) if tag in (r.tags or [])]
        total, page = len(runs), runs[offset : offset + limit]
    else:  # one page from the database, and a count
        total = session.exec(runs_count(stmt), params=params).one()
        page = list(session.exec(runs_page(stmt), params=params))
    return RunsPage(items=public_runs(session, page), total=total, offset=offset, limit=limit)


def like_pattern(text: str) -> str:
    """``text`` anywhere, taken literally (LIKE's ``%`` and ``_`` escaped with ``\\``).

    >>> print(like_pattern("50%_lr"))
    %50\\%\\_lr%
    """
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


@lru_cache
def runs_query(*, status: bool, device: bool, group: bool, worker: bool, text: bool = False, stalled: bool = False,
               sort: RunSort = RunSort.newest) -> Select:
    """Runs in ``sort``'s order (ties: newest first), with the filters asked for as parameters (``status``,
    ``device``, ``group``, ``worker``, ``text``) and ``stalled`` (no parameter)."""
    stmt = select(Run)
    if stalled:
        stmt = stmt.where(col(Run.stalled_at).is_not(None))
    if status:
        stmt = stmt.where(Run.status == bindparam("status"))
    if device:
        stmt = stmt.where((Run.device == bindparam("device")) | (Run.requested_device == bindparam("device")))
    if group:
        stmt = stmt.where(Run.group_id == bindparam("group"))
    if worker:
        stmt = stmt.where((Run.worker == bindparam("worker")) | (Run.worker_host == bindparam("worker")))
    if text:
        stmt = stmt.where(col(Run.name).ilike(bindparam("text"), escape="\\")
                          | col(Run.notes).ilike(bindparam("text"), escape="\\"))
    figure = {RunSort.best_val_loss: Run.best_val_loss, RunSort.time_to_target: Run.target_sec}.get(sort)
    first = [col(figure).is_(None), col(figure).asc()] if figure is not None else []  # runs without it last
    return stmt.order_by(*first, col(Run.id).desc())


@lru_cache
def runs_count(stmt: Select) -> Select:
    return select(func.count()).select_from(stmt.order_by(None).subquery())


@lru_cache
def runs_page(stmt: Select) -> Select:
    return stmt.offset(bindparam("offset")).limit(bindparam("limit"))


def update_run(session: Session, *, run_id: int, body: RunUpdate) -> Run:
    """Renamed, tagged, noted, or put in a group by hand (a new group is named by its id until renamed)."""
    run = get_run(session, run_id=run_id)
    if body.group_id is not None:
        add_group(session, group_id=body.group_id, name=body.group_id)
    return saved_changes(session, run, body)


def delete_run(session: Session, *, run_id: int, settings: Settings) -> None:
    """The run, its rows and its files (checkpoints, logs): the disk it used is freed."""
    run = get_run(session, run_id=run_id)
    if run.status == RunStatus.running:
        raise Conflict(f"run {run_id} is running; cancel it first")
    for table in (Metric, MetricBlock, Sample, BenchmarkResult, Event):
        session.exec(sa_delete(table).where(table.run_id == run_id))  # type: ignore[attr-defined]
    session.delete(run)
    session.commit()
    remove_run_folder(run, settings)


def run_samples(session: Session, *, run_id: int) -> list[SamplePublic]:
    rows = [SamplePublic.model_validate(r._mapping) for r in session.exec(SAMPLES_OF_RUN, params={"run_id": run_id})]
    if not rows:
        get_run(session, run_id=run_id)  # 404 for an unknown run
    return rows


def checkpoint_file(session: Session, *, run_id: int, settings: Settings) -> Path:
    """The best checkpoint, only if the database points to it and it lies inside the run folders."""
    run = get_run(session, run_id=run_id)
    if not run.checkpoint_path:
        raise NotFound(f"run {run_id} has no checkpoint yet")
    path = Path(run.checkpoint_path).resolve()
    if not path.is_relative_to(settings.runs_dir.resolve()) or not path.is_file():
        raise NotFound(f"run {run_id}'s checkpoint file is missing")
    return path


