"""A run's metrics history: ``GET /api/runs/{id}/metrics`` as columns, whole (streamed) or thinned for a chart,
or as rows (JSON, CSV: streamed); and its speed (the median tokens/s the run list and comparisons show).

Thinning (``max_points``) cuts the step range into ``max_points / 2`` buckets; each bucket gives two rows, its
first step with the lowest training loss in it and its last step with the highest (the band a pixel column
would draw), the other fields as logged at those steps; every evaluation row (with a validation loss) is kept as
it is. The buckets are summed up from the run's block summaries (``metric_blocks``) where they are finer than a
bucket, so a million rows read a few thousand blocks, not a million rows.
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from collections.abc import Iterator
from functools import lru_cache

from sqlalchemy import BigInteger, Integer, bindparam, cast, func, literal, union_all
from sqlmodel import Session, col, select

from tinygpt.records import OverfitWatch

from ..db import session_scope
from ..models import Metric, MetricBlock, MetricPublic, Run, RunStatus
from ..settings import Settings
from .events import history_event_id
from .metric_blocks import BLOCK_STEPS, level_for
from .runs import get_run

ROWS_AT_ONCE = 5000  # steps looked up per query (well under any database's limit on parameters)
PAGE_ROWS = 5000  # rows a streamed history reads per query
LAST_STEP = 2**31 - 1  # the end of a range asked without one
METRIC_FIELDS = list(MetricPublic.model_fields)


def in_range(stmt, step, *, run_id: int, lo: int, hi: int):  # noqa: ANN001, ANN201
    return stmt.where(Metric.run_id == run_id, step >= lo, step <= hi)


def metric_columns(session: Session, *, run_id: int, from_step: int | None = None, to_step: int | None = None,
                   max_points: int | None = None) -> dict:
    """``{"run_id", "rows", "downsampled", "last_event_id", "overfit", "columns": {field: [...]}}``, ordered by
    step. ``last_event_id``: the run's newest event when the history was read (a page streams from there);
    ``overfit``: the run's overfitting verdict then (``overfit`` events bring the next ones)."""
    run = get_run(session, run_id=run_id)
    last_event_id = history_event_id(session, run=run)
    overfit = overfit_watch(session, run_id=run.id).verdict()
    lo, hi = step_bounds(session, run_id=run.id, from_step=from_step, to_step=to_step)
    if lo is None:
        return result(run.id, 0, False, last_event_id, overfit, [])
    buckets = max(1, (max_points or 0) // 2)
    level = level_for(hi - lo + 1, buckets)
    rows = count_rows(session, run_id=run.id, lo=lo, hi=hi, level=level)
    if max_points is None or rows <= max_points:
        return result(run.id, rows, False, last_event_id, overfit, every_row(session, run_id=run.id, lo=lo, hi=hi))
    table = thinned(session, run_id=run.id, lo=lo, hi=hi, buckets=buckets, level=level)
    return result(run.id, rows, True, last_event_id, overfit, table)


def step_bounds(session: Session, *, run_id: int, from_step: int | None, to_step: int | None) -> tuple:
    """The first and last logged step in the range (one query, two index seeks), or ``(None, None)``."""
    lo_asked, hi_asked = from_step or 0, LAST_STEP if to_step is None else to_step
    step = col(Metric.step)
    lo, hi = session.exec(in_range(select(func.min(step), func.max(step)), step, run_id=run_id, lo=lo_asked,
                                   hi=hi_asked)).one()
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


def result(run_id: int, rows: int, downsampled: bool, last_event_id: int, overfit: dict, table: list[tuple]) -> dict:
    columns = {f: [r[i] for r in table] for i, f in enumerate(METRIC_FIELDS)}
    for f in ("step", "tokens_seen"):
        columns[f] = [None if v is None else int(v) for v in columns[f]]
    return {"run_id": run_id, "rows": rows, "downsampled": downsampled, "last_event_id": last_event_id,
            "overfit": overfit, "columns": columns}


def history_head(session: Session, *, run_id: int, from_step: int | None, to_step: int | None,
                 summary: bool) -> dict:
    """What a whole history starts with: its first page of rows (a 404 before anything is sent for an unknown
    run), and the range the pages after it read. ``summary`` (the columns format): also its size, and the run's
    newest event id and overfitting verdict, read before the rows (a page streams on from that event).
    ``head["complete"]``: the first page is the whole history (answered at once; a longer one is streamed, a page
    at a time, up to the last step logged when it was asked for)."""
    head: dict = {"run_id": run_id, "lo": from_step or 0, "hi": LAST_STEP if to_step is None else to_step}
    if summary:
        run = get_run(session, run_id=run_id)
        head |= {"last_event_id": history_event_id(session, run=run),
                 "overfit": overfit_watch(session, run_id=run.id).verdict()}
    first = session.exec(first_page_statement(tuple(METRIC_FIELDS)),
                         params={"run_id": run_id, "lo": head["lo"], "hi": head["hi"], "limit": PAGE_ROWS}).all()
    if not first and not summary:
        get_run(session, run_id=run_id)  # an unknown run is a 404; a known one has no rows in the range
    head |= {"first_page": first, "complete": len(first) < PAGE_ROWS}
    if not head["complete"]:  # the pages after the first end where the run's rows ended when it was asked
        head["hi"] = step_bounds(session, run_id=run_id, from_step=from_step, to_step=to_step)[1]
    if summary:
        head |= {"downsampled": False, "rows": len(first) if head["complete"] else
                 count_rows(session, run_id=run_id, lo=head["lo"], hi=head["hi"], level=None)}
    return head


@lru_cache
def first_page_statement(fields: tuple[str, ...]):  # noqa: ANN201
    """A history's first page (built once: the fields, then each row's step and id, the keyset of the next)."""
    step = col(Metric.step)
    return (select(*(col(getattr(Metric, f)) for f in fields), step, col(Metric.id))
            .where(Metric.run_id == bindparam("run_id"), step >= bindparam("lo"), step <= bindparam("hi"))
            .order_by(step, col(Metric.id)).limit(bindparam("limit")))


def stream_columns(settings: Settings, head: dict) -> Iterator[str]:
    """Every row of the range as the columns JSON, one field after the other, read a page at a time in short
    sessions (keyset on step and id): memory stays flat whatever the size, no connection held while the
    client reads."""
    yield json.dumps({k: head[k] for k in ("run_id", "rows", "downsampled", "last_event_id", "overfit")})[:-1] + ', "columns": {'
    for k, field in enumerate(METRIC_FIELDS):
        yield f'{", " if k else ""}"{field}": ['
        first = True
        for page in row_pages(settings, head, [field]):
            yield ("" if first else ", ") + json_items([v for v, in page])
            first = False
        yield "]"
    yield "}}"


def stream_rows_json(settings: Settings, head: dict) -> Iterator[str]:
    """Every row of the range as a JSON list of objects (``format=json``), a page at a time."""
    yield "["
    first = True
    for page in row_pages(settings, head, METRIC_FIELDS):
        yield ("" if first else ", ") + json_items([dict(zip(METRIC_FIELDS, row, strict=True)) for row in page])
        first = False
    yield "]"


def stream_rows_csv(settings: Settings, head: dict) -> Iterator[str]:
    """Every row of the range as CSV (``format=csv``; an empty validation loss where none was measured)."""
    yield ",".join(METRIC_FIELDS) + "\n"
    for page in row_pages(settings, head, METRIC_FIELDS):
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows(["" if v is None else v for v in row] for row in page)
        yield buffer.getvalue()


def row_pages(settings: Settings, head: dict, fields: list[str]) -> Iterator[list[tuple]]:
    """The range's rows (these fields), ordered by step, a page at a time: the head's first page, then the
    others in short sessions (keyset on step and id): memory stays flat and no connection is held while the
    client reads."""
    index = [METRIC_FIELDS.index(f) for f in fields]
    page = head["first_page"]
    if page:
        yield [tuple(row[i] for i in index) for row in page]
    while len(page) == PAGE_ROWS:
        with session_scope(settings) as session:
            page = page_after(session, head, fields, after=(page[-1][-2], page[-1][-1]))
        if page:
            yield [tuple(row[: len(fields)]) for row in page]


def page_after(session: Session, head: dict, fields: list[str], *, after: tuple[int, int]) -> list[tuple]:
    """A page of the range's rows after ``(step, id)``: these fields, then the row's step and id (the keyset)."""
    columns = [col(getattr(Metric, f)) for f in fields]
    return session.exec(
        in_range(select(*columns, col(Metric.step), col(Metric.id)), col(Metric.step),
                 run_id=head["run_id"], lo=head["lo"], hi=head["hi"])
        .where((col(Metric.step) > after[0]) | ((col(Metric.step) == after[0]) & (col(Metric.id) > after[1])))
        .order_by(col(Metric.step), col(Metric.id)).limit(PAGE_ROWS)).all()


def json_items(items: list) -> str:
    """A list's items as JSON, without the brackets (one C-encoder call for a page); a non-finite number is
    ``null``.

    >>> json_items([{"step": 1, "loss": 4.25}, {"step": 2, "loss": float("nan")}])
    '{"step": 1, "loss": 4.25}, {"step": 2, "loss": null}'
    """
    try:
        return json.dumps(items, allow_nan=False)[1:-1]
    except ValueError:  # a NaN or infinity somewhere in the page (rare): written as null
        return json.dumps(finite_or_null(items))[1:-1]


def finite_or_null(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_null(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite_or_null(v) for v in value]
    return value


# -- overfitting ------------------------------------------------------------------------------------
def overfit_watch(session: Session, *, run_id: int) -> OverfitWatch:
    """The one overfitting rule (``tinygpt.records.OverfitWatch``) over the run's evaluations so far (their own
    index: no scan of the other rows)."""
    evaluations = session.exec(select(Metric.step, Metric.val_loss).where(
        Metric.run_id == run_id, col(Metric.val_loss).is_not(None)).order_by(col(Metric.step), col(Metric.id))).all()
    return OverfitWatch.over((step, val) for step, val in evaluations)


def evaluations_after(session: Session, *, run_id: int, step: int) -> list[Metric]:
    """The run's evaluation rows (a validation loss) after ``step``, in step order."""
    return list(session.exec(select(Metric).where(Metric.run_id == run_id, col(Metric.val_loss).is_not(None),
                                                  col(Metric.step) > step).order_by(col(Metric.step))).all())


# -- a run's speed --------------------------------------------------------------------------------
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
