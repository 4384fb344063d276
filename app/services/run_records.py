"""What a training run writes as it goes (its start, metrics rows, samples, new best checkpoints), each
with the event its streams carry: one set of writes for the worker's jobs (``worker/job.py``) and for
runs that report from elsewhere (``app/services/reports.py``). The caller commits."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import delete
from sqlmodel import Session, col

from tinygpt.records import StepMetrics, TargetReached, bits_per_byte, unreached_line

from ..models import Alert, EventType, Metric, Run, RunPublic, Sample
from ..settings import Settings
from .alerts import has_alert, raise_alert
from .events import record_event
from .files import run_disk_bytes
from .metric_blocks import add_row, rebuild_blocks
from .metric_history import overfit_watch


def record_start(session: Session, run: Run, info: dict) -> None:
    """Training (re)starts at ``info["start_step"]``: rows logged after it by an earlier attempt go; the
    resolved device, its description, precision and parameter count are recorded."""
    start = info["start_step"]
    session.exec(delete(Metric).where(col(Metric.run_id) == run.id, col(Metric.step) > start))
    session.exec(delete(Sample).where(col(Sample.run_id) == run.id, col(Sample.step) > start))
    rebuild_blocks(session, run_id=run.id, from_step=start + 1)
    run.device_info = info["device_info"]
    run.precision = info["precision"]
    run.params = info["params"]
    run.target_val_loss = info.get("target_val_loss")  # .get: trainers of older versions report neither
    run.val_bytes_per_token = info.get("val_bytes_per_token")
    if run.target_step is not None and run.target_step > start:  # reached after the resume point: again
        set_target(run, None)
    run.last_step = start
    session.add(run)
    verb = f"resumed at step {start}" if info["resumed"] else "started"
    target = run.target_val_loss
    record_event(session, run_id=run.id, type=EventType.resolved,
                 data={"device": info["device"], "device_info": info["device_info"], "precision": info["precision"],
                       "params": info["params"], "start_step": start, "target_val_loss": target,
                       "target_line": unreached_line(target, finished=False) if target else None})
    record_event(session, run_id=run.id, type=EventType.log,
                 data={"message": f"{verb} on {info['device']} ({info['device_info'].get('name')}), "
                                  f"{info['precision']}, {info['params']:,} parameters"})


def record_metric(session: Session, run: Run, row: dict, *, settings: Settings) -> None:
    """One metrics row (the fields of ``tinygpt.records.StepMetrics``), counted in its blocks, and its event (which
    leaves the outbox after ``TINYGPT_EVENT_WINDOW_SEC``: app/services/outbox.py). An evaluation row also
    brings the run's overfitting verdict (an ``overfit`` event), and the overfitting alert the first time the
    verdict says so."""
    session.add(Metric(run_id=run.id, **row))
    add_row(session, run_id=run.id, step=row["step"], train_loss=row["train_loss"])
    run.last_step = row["step"]
    session.add(run)
    record_event(session, run_id=run.id, type=EventType.metric, data=row)
    if row.get("val_loss") is not None:
        record_evaluation(session, run, row, settings=settings)


def record_evaluation(session: Session, run: Run, row: dict, *, settings: Settings) -> None:
    """An evaluation row (written): its time to target, the overfitting verdict and the alert it may bring."""
    record_target(session, run, StepMetrics(**row))
    watch = overfit_watch(session, run_id=run.id)
    record_event(session, run_id=run.id, type=EventType.overfit, data=watch.verdict())
    if watch.overfitting and not has_alert(session, run_id=run.id, kind=Alert.overfitting):
        raise_alert(session, kind=Alert.overfitting, message=watch.message(), settings=settings, run=run)


def record_target(session: Session, run: Run, row: StepMetrics) -> None:
    """The first evaluation that reaches the run's target is its time to target, with a log line saying so
    (``TargetReached``'s rule, applied to this row, the earlier ones having not: a trainer that knows its
    target measures the whole split at every evaluation whose estimate comes near it)."""
    reached = TargetReached.first([row], run.target_val_loss)
    if run.target_step is not None or reached is None:
        return
    set_target(run, reached)
    session.add(run)
    record_event(session, run_id=run.id, type=EventType.target,
                 data={"target": reached.target, **RunPublic.of(run).time_to_target.model_dump()})
    record_event(session, run_id=run.id, type=EventType.log, data={"message": reached.line()})


def set_target(run: Run, reached: TargetReached | None) -> None:
    """The run's time to target: when it reached it, or None (not yet)."""
    run.target_step, run.target_tokens, run.target_sec, run.target_exact = (
        (reached.step, reached.tokens_seen, reached.elapsed_sec, reached.exact) if reached else (None,) * 4)


def record_sample(session: Session, run_id: int, sample: dict) -> None:
    session.add(Sample(run_id=run_id, step=sample["step"], prompt=sample["prompt"], text=sample["text"]))
    record_event(session, run_id=run_id, type=EventType.sample, data=sample)


def record_best_checkpoint(session: Session, run: Run, *, path: Path, step: int, val_loss: float) -> None:
    run.disk_bytes = run_disk_bytes(run)
    run.checkpoint_path = str(path)
    run.best_val_loss = val_loss
    run.best_step = step
    session.add(run)
    record_event(session, run_id=run.id, type=EventType.best_checkpoint,
                 data={"step": step, "val_loss": val_loss, "val_bpb": bits_per_byte(val_loss, run.val_bytes_per_token)})
    record_event(session, run_id=run.id, type=EventType.log,
                 data={"message": f"best checkpoint at step {step} (val {val_loss:.4f})"})
