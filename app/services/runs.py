"""Runs: create, list, read, update, delete, cancel; metrics, samples and comparisons."""

from __future__ import annotations

import csv
import io
import os
import statistics
import uuid
from functools import lru_cache
from pathlib import Path

from sqlalchemy import Select, bindparam, func
from sqlalchemy import delete as sa_delete
from sqlmodel import Session, col, select

from tinygpt.device import available_devices

from ..errors import Conflict, Invalid, NotFound
from ..models import (
    BenchmarkResult,
    Event,
    EventType,
    Metric,
    MetricBlock,
    MetricPublic,
    Run,
    RunCreate,
    RunOrigin,
    RunPublic,
    RunsPage,
    RunStatus,
    RunUpdate,
    Sample,
    SamplePublic,
    as_utc,
    library_config,
    utcnow,
)
from ..settings import Settings
from .datasets import check_context_fits, check_dataset_exists
from .events import record_event
from .files import remove_run_folder

METRIC_FIELDS = list(MetricPublic.model_fields)
SAMPLE_FIELDS = list(SamplePublic.model_fields)

# The read API's statements are built once and run with parameters: building a statement costs the
# app more than SQLite takes to run it (0.6 ms against 0.3 ms for a run's metrics, measured).
METRICS_OF_RUN = (select(*(col(getattr(Metric, f)) for f in METRIC_FIELDS))
                  .where(Metric.run_id == bindparam("run_id"), col(Metric.step) >= bindparam("from_step"),
                         col(Metric.step) <= bindparam("to_step")).order_by(col(Metric.step), col(Metric.id)))
SAMPLES_OF_RUN = (select(*(col(getattr(Sample, f)) for f in SAMPLE_FIELDS))
                  .where(Sample.run_id == bindparam("run_id")).order_by(col(Sample.step), col(Sample.id)))


@lru_cache
def machine_devices() -> tuple[dict, ...]:
    """This machine's devices (probed once per process: cheap after the first call)."""
    return tuple(available_devices())


def check_device_available(name: str) -> None:
    if name == "auto":
        return
    devices = {d["device"]: d for d in machine_devices()}
    if name in devices and devices[name]["available"]:
        return
    family = name.split(":")[0]
    if family == "cuda" and any(d["device"].startswith("cuda:") and d["available"] for d in devices.values()):
        if name == "cuda":
            return
        raise Invalid(f"device {name!r} does not exist on this machine", field="device")
    reason = devices.get(family, {}).get("reason") or "not found"
    raise Invalid(f"device {name!r} is not available on this machine: {reason}", field="device")


def process_limit(device: str) -> tuple[int, str]:
    """How many training processes a run on ``device`` may start here, and what bounds it: the visible
    GPUs on CUDA, the cores elsewhere (each gloo process is a whole training process on the CPU)."""
    if device.startswith("cuda") or (device == "auto" and any(d["device"].startswith("cuda:") for d in machine_devices())):
        count = sum(1 for d in machine_devices() if d["device"].startswith("cuda:") and d["available"])
        return count, f"the {count} visible GPU{'s' if count != 1 else ''}"
    cores = os.cpu_count() or 1
    return cores, f"this machine's {cores} CPU core{'s' if cores != 1 else ''}"


def check_machine_limits(body: RunCreate, devices: list[str]) -> None:
    """``gpus`` and ``threads`` bounded by what this machine can run (one request must not start 64 processes)."""
    for device in devices:
        limit, what = process_limit(device)
        if body.gpus > limit:
            raise Invalid(f"gpus must be at most {limit} on {device} ({what})", field="gpus")
    check_threads([body.threads] if body.threads else [])


def check_threads(counts: list[int]) -> None:
    cores = os.cpu_count() or 1
    if any(t > cores for t in counts):
        raise Invalid(f"threads must be at most this machine's {cores} CPU cores", field="threads")


def run_summary(run: Run) -> dict:
    """What run-list events carry."""
    return {"id": run.id, "name": run.name, "status": run.status, "device": run.device or run.requested_device,
            "worker": run.worker, "worker_host": run.worker_host}


def set_status(session: Session, run: Run, status: RunStatus, **fields: object) -> None:
    """Change a run's status and record the event in the same transaction."""
    run.status = status
    for key, value in fields.items():
        setattr(run, key, value)
    if RunStatus(status).finished:
        run.tokens_per_sec = median_rate(session, run_id=run.id)
    session.add(run)
    session.flush()
    record_event(session, run_id=run.id, type=EventType.status,
                 data={**run_summary(run), "error": run.error, "best_val_loss": run.best_val_loss,
                       "best_step": run.best_step, "last_step": run.last_step, "stop_reason": run.stop_reason})


def create_runs(session: Session, *, body: RunCreate, settings: Settings) -> list[Run]:
    runs = add_runs(session, body=body, settings=settings)
    session.commit()
    return runs


def check_run(session: Session, *, body: RunCreate, settings: Settings) -> None:
    """What a run's options need of this machine and its data (the model checks the options themselves)."""
    if body.steps > settings.max_steps:
        raise Invalid(f"steps must be at most {settings.max_steps}", field="steps")
    devices = body.devices()
    for name in devices:
        check_device_available(name)
    check_machine_limits(body, devices)
    check_dataset_exists(session, name=body.dataset)
    model = library_config(body).model_config()
    check_context_fits(session, name=body.dataset, context=model.context, vocab_size=model.vocab_size)


def add_runs(session: Session, *, body: RunCreate, settings: Settings, sweep_id: int | None = None,
             trial: int | None = None) -> list[Run]:
    """Queue one run per device of ``body`` (uncommitted: the caller commits)."""
    check_run(session, body=body, settings=settings)
    devices = body.devices()
    config = body.model_dump(mode="json", exclude={"device", "name", "tags"})
    group = uuid.uuid4().hex[:12] if len(devices) > 1 else None
    runs = []
    for device in devices:
        base = body.name or f"{body.preset}-{body.dataset}"
        name = f"{base} [{device}]" if group else base
        run = Run(name=name, config=config, requested_device=device, tags=body.tags, group_id=group,
                  sweep_id=sweep_id, trial=trial)
        session.add(run)
        session.flush()
        run.out_dir = str(settings.runs_dir / str(run.id))
        record_event(session, run_id=run.id, type=EventType.created, data=run_summary(run))
        runs.append(run)
    return runs


def get_run(session: Session, *, run_id: int) -> Run:
    run = session.get(Run, run_id)
    if run is None:
        raise NotFound(f"run {run_id} does not exist")
    return run


def list_runs(
    session: Session,
    *,
    status: RunStatus | None = None,
    device: str | None = None,
    tag: str | None = None,
    group: str | None = None,
    worker: str | None = None,
    stalled: bool = False,
    offset: int = 0,
    limit: int = 50,
) -> RunsPage:
    """One page of runs, newest first; ``worker`` matches a worker's name or its host; ``stalled``: only
    the running runs that are stalled."""
    stmt = runs_query(status=bool(status), device=bool(device), group=bool(group), worker=bool(worker),
                      stalled=stalled)
    params = {"status": status, "device": device, "group": group, "worker": worker, "offset": offset, "limit": limit}
    if tag:  # tags are a JSON list: filtered here, portable across SQLite and PostgreSQL
        runs = [r for r in session.exec(stmt, params=params) if tag in (r.tags or [])]
        total, page = len(runs), runs[offset : offset + limit]
    else:  # one page from the database, and a count
        total = session.exec(runs_count(stmt), params=params).one()
        page = list(session.exec(runs_page(stmt), params=params))
    return RunsPage(items=[RunPublic.of(r) for r in page], total=total, offset=offset, limit=limit)


@lru_cache
def runs_query(*, status: bool, device: bool, group: bool, worker: bool, stalled: bool = False) -> Select:
    """Runs, newest first, with the filters asked for as parameters (``status``, ``device``, ``group``,
    ``worker``) and ``stalled`` (no parameter)."""
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
    return stmt.order_by(col(Run.id).desc())


@lru_cache
def runs_count(stmt: Select) -> Select:
    return select(func.count()).select_from(stmt.order_by(None).subquery())


@lru_cache
def runs_page(stmt: Select) -> Select:
    return stmt.offset(bindparam("offset")).limit(bindparam("limit"))


def update_run(session: Session, *, run_id: int, body: RunUpdate) -> Run:
    run = get_run(session, run_id=run_id)
    changes = body.model_dump(exclude_unset=True, exclude_none=True)
    for key, value in changes.items():
        setattr(run, key, value)
    session.add(run)
    session.commit()
    session.refresh(run)
    return run


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


def cancel_run(session: Session, *, run_id: int, settings: Settings) -> Run:
    run = get_run(session, run_id=run_id)
    if RunStatus(run.status).finished:
        raise Conflict(f"run {run_id} has already finished ({run.status})")
    if run.status == RunStatus.queued:
        set_status(session, run, RunStatus.cancelled, finished_at=utcnow())
    elif trainer_is_silent(run, settings):  # a trainer that comes back is told to stop
        set_status(session, run, RunStatus.cancelled, finished_at=utcnow(), cancel_requested=True,
                   error="cancelled by request while its trainer was not reporting")
    else:
        run.cancel_requested = True
        session.add(run)
        record_event(session, run_id=run.id, type=EventType.log, data={"message": "cancel requested"})
    session.commit()
    if run.sweep_id is not None and run.status == RunStatus.cancelled:
        from .sweeps import settle_sweep  # sweeps build on runs: imported here, not at the top

        settle_sweep(session, sweep_id=run.sweep_id, settings=settings)
    session.refresh(run)
    return run


def trainer_is_silent(run: Run, settings: Settings) -> bool:
    """A reported run whose trainer has not reported for ``stale_after_sec``: nobody would see a request
    to stop, so a cancel ends it at once (a trainer that comes back is told it was cancelled)."""
    if run.origin != RunOrigin.reported or run.heartbeat_at is None:
        return False
    return (utcnow() - as_utc(run.heartbeat_at)).total_seconds() > settings.stale_after_sec


def run_metrics(session: Session, *, run_id: int, from_step: int | None = None,
                to_step: int | None = None) -> list[MetricPublic]:
    params = {"run_id": run_id, "from_step": -1 if from_step is None else from_step,
              "to_step": 2**31 - 1 if to_step is None else to_step}  # steps are 32-bit in the database
    rows = [MetricPublic.model_validate(r._mapping) for r in session.exec(METRICS_OF_RUN, params=params)]
    if not rows:
        get_run(session, run_id=run_id)  # 404 for an unknown run
    return rows


def median_rate(session: Session, *, run_id: int) -> float | None:
    """The median tokens/s over a run's rows (as ``statistics.median``), sorted by the database."""
    rates = select(Metric.tokens_per_sec).where(Metric.run_id == run_id, col(Metric.tokens_per_sec) > 0)
    count = session.exec(select(func.count()).select_from(rates.subquery())).one()
    if not count:
        return None
    middle = session.exec(rates.order_by(col(Metric.tokens_per_sec)).offset((count - 1) // 2)
                          .limit(2 - count % 2)).all()
    return sum(middle) / len(middle)


RECENT_ROWS = 1000  # a running run's tokens/s: the median of its newest rows (bounded, whatever its length)


def run_rate(session: Session, run: Run) -> float | None:
    """A run's median tokens/s: over all its rows once it finished (stored then), over its newest
    ``RECENT_ROWS`` while it runs."""
    if RunStatus(run.status).finished:
        return run.tokens_per_sec if run.tokens_per_sec is not None else median_rate(session, run_id=run.id)
    recent = session.exec(select(Metric.tokens_per_sec).where(Metric.run_id == run.id)
                          .order_by(col(Metric.step).desc()).limit(RECENT_ROWS)).all()
    rates = [r for r in recent if r > 0]
    return statistics.median(rates) if rates else None


def metrics_csv(metrics: list[MetricPublic]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=METRIC_FIELDS, lineterminator="\n")
    writer.writeheader()
    for m in metrics:
        row = m.model_dump()
        row["val_loss"] = "" if m.val_loss is None else m.val_loss
        writer.writerow(row)
    return buf.getvalue()


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


# -- comparison ---------------------------------------------------------------------------------
MAX_COMPARED_RUNS = 10  # one chart stays readable, and the page stays fast


def evaluation_rows(session: Session, *, run_id: int) -> list[MetricPublic]:
    """The rows with a validation loss, by step (their own index: no scan of the other rows)."""
    stmt = select(Metric).where(Metric.run_id == run_id, col(Metric.val_loss).is_not(None)).order_by(col(Metric.step))
    return [MetricPublic.model_validate(m) for m in session.exec(stmt)]


def run_figures(session: Session, run: Run, evals: list[MetricPublic]) -> dict:
    """What the comparison shows of one run, from its evaluations and a few aggregates (never every row)."""
    last_elapsed = session.exec(select(Metric.elapsed_sec).where(Metric.run_id == run.id)
                                .order_by(col(Metric.step).desc()).limit(1)).first()
    peak_mem = session.exec(select(func.max(Metric.peak_mem_mib)).where(Metric.run_id == run.id)).one()
    return {
        "id": run.id,
        "name": run.name,
        "device": run.device or run.requested_device,
        "device_name": (run.device_info or {}).get("name"),
        "worker": RunPublic.of(run).worker.model_dump() if run.worker else None,
        "origin": run.origin,
        "host": run.worker_host,
        "precision": run.precision,
        "status": run.status,
        "final_train_loss": evals[-1].train_loss if evals else None,
        "final_val_loss": evals[-1].val_loss if evals else None,
        "best_val_loss": min((m.val_loss for m in evals), default=None),
        "best_step": min(evals, key=lambda m: m.val_loss).step if evals else None,
        "tokens_per_sec": run_rate(session, run),
        "training_sec": last_elapsed,
        "peak_mem_mib": peak_mem,
    }


def compare_runs(session: Session, *, ids: list[int]) -> dict:
    """Aligned metrics, final/best values, tok/s ratios and the largest gap between loss curves."""
    if len(ids) < 2:
        raise Invalid("give at least two run ids to compare", field="ids")
    if len(ids) > MAX_COMPARED_RUNS:
        raise Invalid(f"compare at most {MAX_COMPARED_RUNS} runs at once (got {len(ids)})", field="ids")
    if not all(1 <= i < 2**63 for i in ids):
        raise Invalid("run ids must be positive 64-bit integers", field="ids")
    runs = [get_run(session, run_id=i) for i in ids]
    evals = {r.id: evaluation_rows(session, run_id=r.id) for r in runs}
    summaries = [run_figures(session, run, evals[run.id]) for run in runs]
    base = summaries[0]["tokens_per_sec"]
    for s in summaries:
        s["speedup_vs_first"] = s["tokens_per_sec"] / base if base and s["tokens_per_sec"] else None

    val_by_run = [{m.step: m for m in evals[r.id]} for r in runs]
    shared = sorted(set.intersection(*(set(v) for v in val_by_run)))
    aligned = [
        {"step": step, "runs": [{"train_loss": v[step].train_loss, "val_loss": v[step].val_loss} for v in val_by_run]}
        for step in shared
    ]
    max_val_gap = max_train_gap = None
    if shared:
        max_val_gap = max(max(v[s].val_loss for v in val_by_run) - min(v[s].val_loss for v in val_by_run) for s in shared)
        max_train_gap = max(
            max(v[s].train_loss for v in val_by_run) - min(v[s].train_loss for v in val_by_run) for s in shared
        )
    configs = [r.config | {"device": r.requested_device} for r in runs]
    keys = sorted(set().union(*configs))
    differences = {k: [c.get(k) for c in configs] for k in keys if len({repr(c.get(k)) for c in configs}) > 1}
    return {
        "runs": summaries,
        "shared_eval_steps": shared,
        "aligned": aligned,
        "max_val_loss_gap": max_val_gap,
        "max_train_loss_gap": max_train_gap,
        "config_differences": differences,
    }
