"""A run's metrics history as columns, whole or thinned for a chart: ``GET /api/runs/{id}/metrics?format=columns``.

Thinning (``max_points``) cuts the step range into ``max_points / 2`` buckets; each bucket gives two rows, its
first step with the lowest training loss in it and its last step with the highest (the band a pixel column
would draw), the other fields as logged at those steps; every evaluation row (with a validation loss) is kept as
it is. The buckets are summed up from the run's block summaries (``metric_blocks``) where they are finer than a
bucket, so a million rows read a few thousand blocks, not a million rows.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

from sqlalchemy import BigInteger, Integer, cast, func, literal, union_all
from sqlmodel import Session, col, select

from ..db import get_engine
from ..models import Metric, MetricBlock
from ..settings import Settings
from .events import last_run_event_id
from .metric_blocks import BLOCK_STEPS, level_for
from .runs import METRIC_FIELDS, get_run

ROWS_AT_ONCE = 5000  # steps looked up per query (well under any database's limit on parameters)
PAGE_ROWS = 5000  # rows a streamed history reads per query


def in_range(stmt, step, *, run_id: int, lo: int, hi: int):  # noqa: ANN001, ANN201
    return stmt.where(Metric.run_id == run_id, step >= lo, step <= hi)


def metric_columns(session: Session, *, run_id: int, from_step: int | None = None, to_step: int | None = None,
                   max_points: int | None = None) -> dict:
    """``{"run_id", "rows", "downsampled", "last_event_id", "columns": {field: [...]}}``, ordered by step.
    ``last_event_id``: the run's newest event when the history was read (a page streams from there)."""
    run = get_run(session, run_id=run_id)
    last_event_id = last_run_event_id(session, run_id=run.id)
    lo, hi = step_bounds(session, run_id=run.id, from_step=from_step, to_step=to_step)
    if lo is None:
        return result(run.id, 0, False, last_event_id, [])
    buckets = max(1, (max_points or 0) // 2)
    level = level_for(hi - lo + 1, buckets)
    rows = count_rows(session, run_id=run.id, lo=lo, hi=hi, level=level)
    if max_points is None or rows <= max_points:
        return result(run.id, rows, False, last_event_id, every_row(session, run_id=run.id, lo=lo, hi=hi))
    table = thinned(session, run_id=run.id, lo=lo, hi=hi, buckets=buckets, level=level)
    return result(run.id, rows, True, last_event_id, table)


def step_bounds(session: Session, *, run_id: int, from_step: int | None, to_step: int | None) -> tuple:
    """The first and last logged step in the range (two index seeks), or ``(None, None)``."""
    lo_asked, hi_asked = from_step or 0, 2**31 - 1 if to_step is None else to_step
    step = col(Metric.step)
    lo = session.exec(in_range(select(func.min(step)), step, run_id=run_id, lo=lo_asked, hi=hi_asked)).one()
    hi = session.exec(in_range(select(func.max(step)), step, run_id=run_id, lo=lo_asked, hi=hi_asked)).one()
    return lo, hi


def full_blocks(level: int, lo: int, hi: int) -> tuple[int, int]:
    """The blocks of ``level`` that lie wholly inside ``[lo, hi]``: first and last (first > last: none)."""
    size = BLOCK_STEPS[level]
    return -(-lo // size), (hi + 1) // size - 1


def pieces(run_id: int, *, lo: int, hi: int, level: int | None):  # noqa: ANN201
    """The range as ``(first, last, low, high, rows)`` pieces: the whole blocks of ``level`` in it and the rows
    at its edges (every row when ``level`` is None)."""
    step = col(Metric.step)
    loss = col(Metric.train_loss)
    labelled = (step.label("first"), step.label("last"), loss.label("low"), loss.label("high"), literal(1).label("rows"))
    rows_of = lambda a, b: in_range(select(*labelled), step, run_id=run_id, lo=a, hi=b)  # noqa: E731
    if level is None:
        return rows_of(lo, hi)
    first, last = full_blocks(level, lo, hi)
    size = BLOCK_STEPS[level]
    if first > last:
        return rows_of(lo, hi)
    blocks = select(MetricBlock.first_step, MetricBlock.last_step, MetricBlock.min_train_loss,
                    MetricBlock.max_train_loss, MetricBlock.rows).where(
        MetricBlock.run_id == run_id, MetricBlock.level == level, col(MetricBlock.block) >= first,
        col(MetricBlock.block) <= last)
    return union_all(blocks, rows_of(lo, first * size - 1), rows_of((last + 1) * size, hi))


def count_rows(session: Session, *, run_id: int, lo: int, hi: int, level: int | None) -> int:
    part = pieces(run_id, lo=lo, hi=hi, level=level).subquery()
    return int(session.exec(select(func.coalesce(func.sum(part.c[4]), 0))).one())


def every_row(session: Session, *, run_id: int, lo: int, hi: int) -> list[tuple]:
    fields = [col(getattr(Metric, f)) for f in METRIC_FIELDS]
    stmt = in_range(select(*fields), col(Metric.step), run_id=run_id, lo=lo, hi=hi)
    return [tuple(r) for r in session.exec(stmt.order_by(col(Metric.step), col(Metric.id)))]


def thinned(session: Session, *, run_id: int, lo: int, hi: int, buckets: int, level: int | None) -> list[tuple]:
    """Two rows per bucket (its first step with the lowest train loss, its last with the highest) and every
    evaluation row, merged by step."""
    part = pieces(run_id, lo=lo, hi=hi, level=level).subquery()
    first, last, low, high = (part.c[i] for i in range(4))
    # a million steps x a thousand buckets: past 32 bits
    bucket = cast((cast(first, BigInteger) - lo) * buckets / (hi - lo + 1), Integer)
    grouped = session.exec(select(func.min(first), func.max(last), func.min(low), func.max(high))
                           .group_by(bucket)).all()
    logged = rows_at(session, run_id=run_id, steps=sorted({s for g in grouped for s in g[:2]}))
    train = METRIC_FIELDS.index("train_loss")
    by_step: dict[int, tuple] = {}
    for first_step, last_step, lowest, highest in grouped:
        for step, loss in ((first_step, lowest), (last_step, highest)):
            row = list(logged[step])
            row[train] = loss
            row[METRIC_FIELDS.index("val_loss")] = None
            by_step[step] = tuple(row)
    evals = in_range(select(*(col(getattr(Metric, f)) for f in METRIC_FIELDS)), col(Metric.step), run_id=run_id,
                     lo=lo, hi=hi).where(col(Metric.val_loss).is_not(None))
    for row in session.exec(evals):
        by_step[row[0]] = tuple(row)
    return [by_step[s] for s in sorted(by_step)]


def rows_at(session: Session, *, run_id: int, steps: list[int]) -> dict[int, tuple]:
    """The rows logged at these steps, by step (the newest where a step was logged twice)."""
    fields = [col(getattr(Metric, f)) for f in METRIC_FIELDS]
    found: dict[int, tuple] = {}
    for start in range(0, len(steps), ROWS_AT_ONCE):
        chunk = steps[start : start + ROWS_AT_ONCE]
        stmt = select(*fields).where(Metric.run_id == run_id, col(Metric.step).in_(chunk)).order_by(col(Metric.id))
        found.update({r[0]: tuple(r) for r in session.exec(stmt)})
    return found


def result(run_id: int, rows: int, downsampled: bool, last_event_id: int, table: list[tuple]) -> dict:
    columns = {f: [r[i] for r in table] for i, f in enumerate(METRIC_FIELDS)}
    for f in ("step", "tokens_seen"):
        columns[f] = [None if v is None else int(v) for v in columns[f]]
    return {"run_id": run_id, "rows": rows, "downsampled": downsampled, "last_event_id": last_event_id,
            "columns": columns}


def history_head(session: Session, *, run_id: int, from_step: int | None, to_step: int | None) -> dict:
    """What a streamed whole history starts with: the run (404 before anything is sent), its range and size."""
    run = get_run(session, run_id=run_id)
    last_event_id = last_run_event_id(session, run_id=run.id)
    lo, hi = step_bounds(session, run_id=run.id, from_step=from_step, to_step=to_step)
    rows = 0 if lo is None else count_rows(session, run_id=run.id, lo=lo, hi=hi, level=None)
    return {"run_id": run.id, "rows": rows, "downsampled": False, "last_event_id": last_event_id, "lo": lo, "hi": hi}


def stream_columns(settings: Settings, head: dict) -> Iterator[str]:
    """Every row of the range as the columns JSON, one field after the other, read a page at a time in short
    sessions (keyset on step and id): memory stays flat whatever the size, no connection held while the
    client reads."""
    yield json.dumps({k: head[k] for k in ("run_id", "rows", "downsampled", "last_event_id")})[:-1] + ', "columns": {'
    for k, field in enumerate(METRIC_FIELDS):
        yield f'{", " if k else ""}"{field}": ['
        first = True
        for values in column_pages(settings, field, head):
            yield ("" if first else ", ") + ", ".join(json_number(v) for v in values)
            first = False
        yield "]"
    yield "}}"


def column_pages(settings: Settings, field: str, head: dict) -> Iterator[list]:
    if head["lo"] is None:
        return
    after = (head["lo"] - 1, 0)
    while True:
        with Session(get_engine(settings)) as session:
            page = session.exec(
                in_range(select(col(getattr(Metric, field)), col(Metric.step), col(Metric.id)), col(Metric.step),
                         run_id=head["run_id"], lo=head["lo"], hi=head["hi"])
                .where((col(Metric.step) > after[0]) | ((col(Metric.step) == after[0]) & (col(Metric.id) > after[1])))
                .order_by(col(Metric.step), col(Metric.id)).limit(PAGE_ROWS)).all()
        if page:
            yield [v for v, _, _ in page]
        if len(page) < PAGE_ROWS:
            return
        after = (page[-1][1], page[-1][2])


def json_number(value: float | int | None) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "null"
    return json.dumps(int(value) if isinstance(value, int) else value)
