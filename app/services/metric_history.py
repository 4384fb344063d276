"""A run's metrics history as columns, whole or thinned for a chart: ``GET /api/runs/{id}/metrics?format=columns``.

Thinning (``max_points``) happens in the database, in one pass over the run's index: the step range is cut
into ``max_points / 2`` buckets, and each bucket gives its first and last step with the lowest and highest
training loss in it (the band a pixel column would draw) and the mean of the other columns; every evaluation
row (with a validation loss) is kept as it is. A chart of a million rows thus reads ~``max_points`` rows.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Integer, cast, func
from sqlmodel import Session, col, select

from ..models import Event, Metric
from .runs import METRIC_FIELDS, get_run

MEANS = ("lr", "tokens_per_sec", "elapsed_sec", "tokens_seen", "epochs", "peak_mem_mib")


def step_filter(stmt, *, run_id: int, from_step: int | None, to_step: int | None):  # noqa: ANN001, ANN201
    stmt = stmt.where(Metric.run_id == run_id)
    if from_step is not None:
        stmt = stmt.where(col(Metric.step) >= from_step)
    if to_step is not None:
        stmt = stmt.where(col(Metric.step) <= to_step)
    return stmt


def metric_columns(session: Session, *, run_id: int, from_step: int | None = None, to_step: int | None = None,
                   max_points: int | None = None) -> dict:
    """``{"run_id", "rows", "downsampled", "last_event_id", "columns": {field: [...]}}``, ordered by step.
    ``last_event_id``: the run's newest event when the history was read (a page streams from there)."""
    run = get_run(session, run_id=run_id)
    last_event_id = session.exec(select(func.max(Event.id)).where(Event.run_id == run.id)).one() or 0
    span = session.exec(step_filter(select(func.count(), func.min(Metric.step), func.max(Metric.step)),
                                    run_id=run.id, from_step=from_step, to_step=to_step)).one()
    rows, lo, hi = span
    if max_points is None or rows <= max_points:
        table = [tuple(r) for r in session.exec(step_filter(
            select(*(col(getattr(Metric, f)) for f in METRIC_FIELDS)), run_id=run.id, from_step=from_step,
            to_step=to_step).order_by(col(Metric.step), col(Metric.id)))]
        return result(run.id, rows, False, last_event_id, table)
    table = thinned(session, run_id=run.id, from_step=from_step, to_step=to_step, lo=lo, hi=hi,
                    buckets=max(1, max_points // 2))
    return result(run.id, rows, True, last_event_id, table)


def thinned(session: Session, *, run_id: int, from_step: int | None, to_step: int | None, lo: int, hi: int,
            buckets: int) -> list[tuple]:
    """Two rows per bucket (its first step with the lowest train loss, its last with the highest) and every
    evaluation row, merged by step."""
    step = cast(col(Metric.step), BigInteger)  # a million steps x a thousand buckets: past 32 bits
    bucket = cast((step - lo) * buckets / (hi - lo + 1), Integer).label("bucket")
    means = [func.avg(getattr(Metric, f)) for f in MEANS]
    grouped = session.exec(step_filter(
        select(func.min(Metric.step), func.max(Metric.step), func.min(Metric.train_loss), func.max(Metric.train_loss),
               *means), run_id=run_id, from_step=from_step, to_step=to_step).group_by(bucket)).all()
    evals = session.exec(step_filter(select(*(col(getattr(Metric, f)) for f in METRIC_FIELDS)), run_id=run_id,
                                     from_step=from_step, to_step=to_step).where(col(Metric.val_loss).is_not(None))).all()
    by_step: dict[int, tuple] = {}
    for first, last, low, high, *rest in grouped:
        extra = dict(zip(MEANS, rest, strict=True))
        for step, loss in ((first, low), (last, high)):
            by_step[step] = tuple(loss if f == "train_loss" else None if f == "val_loss" else step if f == "step"
                                  else extra[f] for f in METRIC_FIELDS)
    for row in evals:
        by_step[row[0]] = tuple(row)
    return [by_step[s] for s in sorted(by_step)]


def result(run_id: int, rows: int, downsampled: bool, last_event_id: int, table: list[tuple]) -> dict:
    columns = {f: [r[i] for r in table] for i, f in enumerate(METRIC_FIELDS)}
    for f in ("step", "tokens_seen"):
        columns[f] = [None if v is None else int(v) for v in columns[f]]
    return {"run_id": run_id, "rows": rows, "downsampled": downsampled, "last_event_id": last_event_id,
            "columns": columns}
