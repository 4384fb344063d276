"""Runs of other trainers (``RunOrigin.tensorboard``, ``RunOrigin.log_file``): every value they logged kept under
its own name (``metric_series``), and the names that mean a run column (``tinygpt.metric_names``, the one
mapping) filling the run's metrics rows, so that best val, the overfitting gap, time to target, compare and
groups work on them as on any run. No worker claims them."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator

from sqlalchemy import tuple_
from sqlmodel import Session, col, select

from tinygpt.metric_names import (
    column_for,
    mapped_rows,
    mapping_of,
    steps_of,
    title_for,
    tokens_per_step_of,
)
from tinygpt.records import parse_head_score_name

from ..db import session_scope
from ..models import (
    EventType,
    ForeignImport,
    Metric,
    MetricPublic,
    Run,
    RunStatus,
    SeriesPoint,
    SeriesPublic,
    as_utc,
    utcnow,
)
from ..settings import Settings
from .events import record_event
from .lifecycle import change_status, new_run
from .metric_blocks import rebuild_blocks
from .reports import write_rows
from .run_records import record_evaluation, record_metric
from .series_points import json_number, record_points

#: What each format read is called in the run's log.
SOURCE_TEXT = {"tensorboard": "TensorBoard event files", "nanogpt": "a nanoGPT log", "llmc": "an llm.c log",
               "modded-nanogpt": "a modded-nanogpt log"}
#: The most points of one name a series read answers with (thinned evenly past it, first and last kept).
SERIES_POINTS_MAX = 100_000

def planned_steps(body: ForeignImport, last_step: int) -> int:
    """The run's steps: as given, else a param that counts them (``max_iters``, ...), else its last step."""
    if body.steps is not None:
        return body.steps
    steps = steps_of(body.params)
    return last_step if steps is None else steps


def import_foreign(session: Session, *, body: ForeignImport, settings: Settings) -> Run:
    """A finished run of another trainer, every value it logged kept (commits)."""
    rows = mapped_rows([(p.name, p.step, p.value, p.wall_time) for p in body.points],
                       tokens_per_step=body.tokens_per_step)
    last = max(p.step for p in body.points)
    steps = planned_steps(body, last)
    config = {**body.params, "steps": steps}  # its params as its script had them; steps: what the pages count to
    run = new_run(session, name=body.name, config=config, settings=settings, requested_device=body.device or "auto",
                  origin=body.origin, status=RunStatus.running, tags=body.tags, started_at=utcnow(),
                  device=body.device, device_info=body.device_info)
    run.target_val_loss = body.target_val_loss
    record_points(session, run_id=run.id, points=[p.model_dump() for p in body.points])
    write_rows(session, run, rows)
    mapped = mapping_of(p.name for p in body.points)
    record_event(session, run_id=run.id, type=EventType.log, data={
        "message": f"imported from {SOURCE_TEXT.get(body.source, body.source)}: {len(body.points)} values of "
                   f"{len({p.name for p in body.points})} names, {len(rows)} metrics rows; mapped: "
                   + (", ".join(f"{name} -> {column}" for name, column in mapped.items()) or "none")})
    error = None if body.status == RunStatus.succeeded else f"imported: its logs end at step {last} of {steps}"
    change_status(session, run, RunStatus(body.status), settings=settings, finished_at=utcnow(), error=error)
    session.commit()
    return run


def logged_names(session: Session, *, run_id: int) -> list[str]:
    """The names the run's trainer logged, in order."""
    return list(session.exec(select(SeriesPoint.name).where(SeriesPoint.run_id == run_id).distinct()
                             .order_by(col(SeriesPoint.name))).all())


def run_series(session: Session, *, run_id: int, max_points: int = SERIES_POINTS_MAX) -> list[SeriesPublic]:
    """Every series the run's trainer logged, by name, each thinned to ``max_points`` (first and last kept)."""
    names = logged_names(session, run_id=run_id)
    out = []
    for name in names:
        points = session.exec(select(SeriesPoint.step, SeriesPoint.value, SeriesPoint.wall_time, SeriesPoint.is_nan)
                              .where(SeriesPoint.run_id == run_id, SeriesPoint.name == name)
                              .order_by(col(SeriesPoint.step))).all()
        if len(points) > max_points:
            stride = -(-len(points) // max_points)
            points = [*points[:-1:stride], points[-1]]
        out.append(SeriesPublic(name=name, column=column_for(name), steps=[p[0] for p in points],
                                values=[None if p[3] else json_number(p[1]) for p in points],
                                wall_times=[p[2] for p in points]))
    return out


def series_names(session: Session, *, run_id: int) -> tuple[list[tuple[str, str]], list[str]]:
    """What the run page says of a foreign run's names: (name, the column it fills) for the mapped ones, and
    the names drawn as charts of their own (a name that only says the step, nanoGPT's ``iter``, is neither; nor
    are the heads' recorded scores)."""
    titles = {name: title_for(name) for name in logged_names(session, run_id=run_id)
              if parse_head_score_name(name) is None}  # the heads' scores: drawn by the Inside view
    mapped = [(name, title) for name, title in titles.items() if title is not None]
    return mapped, [name for name, title in titles.items() if title is None]


SERIES_CSV_COLUMNS = ["name", "step", "value", "wall_time"]
PAGE_POINTS = 5000


def series_csv(settings: Settings, *, run_id: int) -> Iterator[str]:
    """Every point of every series of the run as CSV, none thinned, read a page at a time (keyset on name and
    step) in short sessions."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(SERIES_CSV_COLUMNS)
    after: tuple[str, int] = ("", -1)
    while True:
        with session_scope(settings) as session:
            page = session.exec(select(SeriesPoint.name, SeriesPoint.step, SeriesPoint.value, SeriesPoint.wall_time,
                                       SeriesPoint.is_nan)
                                .where(SeriesPoint.run_id == run_id,
                                       tuple_(col(SeriesPoint.name), col(SeriesPoint.step)) > after)
                                .order_by(col(SeriesPoint.name), col(SeriesPoint.step)).limit(PAGE_POINTS)).all()
        writer.writerows((name, step, "nan" if is_nan else value, wall) for name, step, value, wall, is_nan in page)
        yield buf.getvalue()
        buf.seek(0)
        buf.truncate()
        if len(page) < PAGE_POINTS:
            return
        after = (page[-1][0], page[-1][1])


def record_live_values(session: Session, run: Run, *, points: list[dict], settings: Settings) -> None:
    """Values a client logs as its run trains (MLflow's: ``name``, ``step``, ``value``, ``wall_time``): kept by
    name, and the mapped ones filling the run's row at their step (a row written before at that step takes them:
    clients log each name on its own), each row's event for the live pages; the run's best evaluation follows.
    A value that is not finite (MLflow takes NaN) is kept in its series only (uncommitted)."""
    record_points(session, run_id=run.id, points=points)
    start = as_utc(run.started_at).timestamp() if run.started_at else None
    rows = mapped_rows([(p["name"], p["step"], p["value"], p["wall_time"]) for p in points
                        if math.isfinite(p["value"])],
                       tokens_per_step=tokens_per_step_of(run.config), start_time=start)
    for row in rows:
        known = session.exec(select(Metric).where(Metric.run_id == run.id, Metric.step == row["step"])).first()
        last_step = max(run.last_step, row["step"])
        if known is None:
            record_metric(session, run, row, settings=settings)
        else:
            had_val = known.val_loss
            for name, value in row.items():
                # the step's time is its first value's
                if value is not None and (name != "elapsed_sec" or known.elapsed_sec is None):
                    setattr(known, name, value)
            session.add(known)
            session.flush()
            rebuild_blocks(session, run_id=run.id, from_step=row["step"])
            merged = MetricPublic.model_validate(known).model_dump()
            record_event(session, run_id=run.id, type=EventType.metric, data=merged)
            if merged["val_loss"] is not None and merged["val_loss"] != had_val:
                record_evaluation(session, run, merged, settings=settings)
            row = merged
        run.last_step, run.progress_at = last_step, utcnow()
        if row["val_loss"] is not None and (run.best_val_loss is None or row["val_loss"] < run.best_val_loss):
            run.best_val_loss, run.best_step = row["val_loss"], row["step"]
    run.heartbeat_at = utcnow()
    session.add(run)
