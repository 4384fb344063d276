"""Runs trained elsewhere: reported live (``tinygpt train --report-to``, ``tinygpt/report.py``) or imported
when finished (``tinygpt import``). They are ordinary runs (pages, compare, export, samples) that no worker
claims; a reported run's trainer sends its journal in numbered items, and each number is applied once
(``runs.report_seq``): a batch sent again after a lost answer changes nothing."""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import insert
from sqlmodel import Session, select

from tinygpt.records import StepMetrics, TargetReached

from ..errors import Conflict, Invalid
from ..models import (
    EventType,
    Metric,
    Pool,
    ReportAck,
    ReportedRunBase,
    ReportedRunCreate,
    ReportItem,
    Run,
    RunImport,
    RunOrigin,
    RunStatus,
    utcnow,
)
from ..settings import Settings
from .alerts import has_alert, raise_alert
from .datasets import dataset_target
from .events import record_event
from .files import run_disk_bytes
from .head_scores import record_head_scores
from .lifecycle import change_status, new_run
from .metric_blocks import rebuild_blocks
from .run_records import record_best_checkpoint, record_metric, record_sample, record_start, set_target
from .runs import get_run

CHECKPOINT_NAME = "best.pt"
SAFETENSORS_CHECKPOINT = "best.safetensors"  # an exported one uploaded (tinygpt export --format safetensors)


def trained_elsewhere(session: Session, *, body: ReportedRunBase, origin: RunOrigin, settings: Settings,
                      **fields: object) -> Run:
    """A run of ``origin``, running (its rows follow), with its folder for an uploaded checkpoint; uncommitted."""
    settings.receiver_policy.check_run_urls(body.config.notify.urls, field="config.notify.urls")
    return new_run(session, name=body.name, config=body.config.model_dump(mode="json"), settings=settings,
                   requested_device=body.device, origin=origin, status=RunStatus.running, steps_field="config.steps",
                   tags=body.tags, worker_host=body.host, started_at=utcnow(), **fields)


def find_reported_run(session: Session, *, report_id: str) -> Run | None:
    return session.exec(select(Run).where(Run.report_id == report_id)).first()


def create_reported_run(session: Session, *, body: ReportedRunCreate, settings: Settings) -> Run:
    """The run a trainer reports to; the same ``report_id`` again gives the same run."""
    existing = find_reported_run(session, report_id=body.report_id)
    if existing is not None:
        return existing
    run = trained_elsewhere(session, body=body, origin=RunOrigin.reported, settings=settings,
                            report_id=body.report_id, heartbeat_at=utcnow())
    record_event(session, run_id=run.id, type=EventType.log,
                 data={"message": f"reported from {body.host or 'another machine'}: trained there by tinygpt train"})
    session.commit()
    return run


def takes_reports(run: Run) -> bool:
    """Whether the run's trainer reports here: a reported run, or a Slurm run's job."""
    return run.origin == RunOrigin.reported or run.pool == Pool.slurm


def reported_run(session: Session, *, run_id: int) -> Run:
    run = get_run(session, run_id=run_id)
    if not takes_reports(run):
        raise Conflict(f"run {run_id} is trained by this dashboard's workers; only reported runs take reports")
    return run


def trained_here(run: Run) -> bool:
    """A run of the local workers: its checkpoints are its job's own, never uploaded."""
    return run.origin == RunOrigin.dashboard and run.pool == Pool.local


def apply_report(session: Session, *, run_id: int, items: list[ReportItem], settings: Settings) -> ReportAck:
    """Apply the items that follow the last one applied, in order (a gap stops there: the trainer resends
    from the acknowledged number); a heartbeat for the run (commits)."""
    run = reported_run(session, run_id=run_id)
    for item in sorted(items, key=lambda i: i.seq):
        if item.seq <= run.report_seq:
            continue  # applied before: its answer was lost
        if item.seq != run.report_seq + 1:
            break
        apply_item(session, run, item, settings)
        run.report_seq = item.seq
    run.heartbeat_at = utcnow()
    session.add(run)
    session.commit()
    return ReportAck(applied_seq=run.report_seq, cancel_requested=run.cancel_requested, status=run.status)


def apply_item(session: Session, run: Run, item: ReportItem, settings: Settings) -> None:
    data = item.data
    if item.kind == "start":
        record_start(session, run, data.model_dump())
        run.device = data.device
        if run.status == RunStatus.queued:  # a Slurm run: its job has started training
            change_status(session, run, RunStatus.running, settings=settings, started_at=utcnow())
        elif RunStatus(run.status).finished:  # resumed after it ended (a crash the dashboard called an end)
            change_status(session, run, RunStatus.running, settings=settings, finished_at=None, error=None)
    elif item.kind == "metric":
        record_metric(session, run, data.model_dump(), settings=settings)
        run.progress_at = utcnow()
        if data.val_loss is not None and (run.best_val_loss is None or data.val_loss < run.best_val_loss):
            run.best_val_loss, run.best_step = data.val_loss, data.step  # live in the list; the upload confirms
    elif item.kind == "sample":
        record_sample(session, run.id, data.model_dump())
    elif item.kind == "head_scores":
        record_head_scores(session, run_id=run.id, step=data.step, scores=data.scores)
    elif item.kind == "log":
        record_event(session, run_id=run.id, type=EventType.log, data={"message": data.message})
    elif item.kind == "alert" and not has_alert(session, run_id=run.id, kind=data.kind):  # from older trainers
        raise_alert(session, kind=data.kind, message=data.message, settings=settings, run=run)
    elif item.kind == "status" and not RunStatus(run.status).finished:
        # a Slurm trial its sweep pruned stops as a cancel does: its end is the pruner's
        status = RunStatus.pruned if run.prune_requested and data.status == RunStatus.cancelled else data.status
        error = None if status == RunStatus.pruned else data.error
        change_status(session, run, RunStatus(status), settings=settings, alert=data.alert, error=error,
                      stop_reason=data.stop_reason, finished_at=utcnow(), stalled_at=None,
                      disk_bytes=run_disk_bytes(run))


def accept_checkpoint(session: Session, *, run_id: int, upload: Path, seq: int | None, settings: Settings) -> ReportAck:
    """An uploaded file becomes the run's best checkpoint once it proves to be one (``verify_checkpoint``:
    never unpickled beyond tensors and plain data, the model checked without being built); commits."""
    from tinygpt.checkpoint import (  # torch: on the first upload, not at start
        CheckpointError,
        is_safetensors,
        verify_checkpoint,
    )

    run = get_run(session, run_id=run_id)
    if trained_here(run):
        raise Conflict(f"run {run_id} is trained by this dashboard's workers; its checkpoints are its own")
    if seq is not None and seq <= run.report_seq:
        return ReportAck(applied_seq=run.report_seq, cancel_requested=run.cancel_requested, status=run.status)
    try:
        state = verify_checkpoint(upload)
    except CheckpointError as exc:
        raise Invalid(f"not a checkpoint this dashboard can load: {exc}".replace(str(upload), "the upload")
                      .replace(upload.name, "the upload"),
                      field="body") from None
    # an exported .safetensors (weights and configs, no optimizer) serves samples and exports as well
    path, other = (Path(run.out_dir) / name for name in ((SAFETENSORS_CHECKPOINT, CHECKPOINT_NAME)
                   if is_safetensors(upload) else (CHECKPOINT_NAME, SAFETENSORS_CHECKPOINT)))
    os.replace(upload, path)
    other.unlink(missing_ok=True)  # one best checkpoint per run
    train_state = state.get("train_state") or {}
    step = int(train_state.get("best_step") or state.get("step") or 0)
    val_loss = state.get("best_val_loss", run.best_val_loss)
    if val_loss is None:  # a checkpoint saved before any evaluation
        run.checkpoint_path, run.disk_bytes = str(path), run_disk_bytes(run)
    else:
        record_best_checkpoint(session, run, path=path, step=step, val_loss=float(val_loss))
    if seq is not None and seq == run.report_seq + 1:
        run.report_seq = seq
    session.add(run)
    session.commit()
    return ReportAck(applied_seq=run.report_seq, cancel_requested=run.cancel_requested, status=run.status)


def upload_folder(session: Session, *, run_id: int) -> Path:
    """Where an upload for the run is written while it streams in (the run's folder)."""
    run = get_run(session, run_id=run_id)
    if trained_here(run):
        raise Conflict(f"run {run_id} is trained by this dashboard's workers; its checkpoints are its own")
    folder = Path(run.out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def import_run(session: Session, *, body: RunImport, settings: Settings) -> Run:
    """A finished run with all its rows, written in bulk (no metric events: pages read its history)."""
    rows = [m.model_dump() for m in body.metrics]
    run = trained_elsewhere(session, body=body, origin=RunOrigin.imported, settings=settings, device=body.device,
                            device_info=body.device_info, precision=body.precision, params=body.params)
    run.target_val_loss = dataset_target(session, name=body.config.dataset, configured=body.config.target_val_loss)
    run.val_bytes_per_token = body.val_bytes_per_token
    write_rows(session, run, rows)
    for sample in body.samples:
        record_sample(session, run.id, sample.model_dump())
    record_event(session, run_id=run.id, type=EventType.log,
                 data={"message": f"imported: {len(rows)} metrics rows, trained on {body.device}"
                                  f" ({body.device_info.get('name') or 'device not named'})"})
    change_status(session, run, RunStatus(body.status), settings=settings, finished_at=utcnow(), error=body.error)
    session.commit()
    return run



def write_rows(session: Session, run: Run, rows: list[dict]) -> None:
    """A finished run's metrics rows in bulk (no metric events: pages read its history): its last step, best
    evaluation, time to its target (``run.target_val_loss``, set before) and block summaries follow from them."""
    rows = sorted(rows, key=lambda r: r["step"])
    evals = [r for r in rows if r["val_loss"] is not None]
    best = min(evals, key=lambda r: r["val_loss"]) if evals else None
    run.last_step = rows[-1]["step"] if rows else 0
    run.best_val_loss, run.best_step = (best["val_loss"], best["step"]) if best else (None, None)
    if rows:
        session.execute(insert(Metric), [{"run_id": run.id, **r} for r in rows])
    set_target(run, TargetReached.first([StepMetrics(**r) for r in rows], run.target_val_loss))
    rebuild_blocks(session, run_id=run.id)
    session.add(run)
