"""Every metrics row of many runs as one long table (``GET /api/export``): CSV or JSON lines, written
as it is read, a page of rows at a time in short sessions, so memory stays flat whatever the size and
no database connection is held while the client reads."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator

from sqlmodel import Session, col, select

from tinygpt.records import bits_per_byte

from ..db import session_scope
from ..errors import Invalid
from ..models import MAX_INT64, Metric
from ..settings import Settings
from .groups import group_names
from .runs import get_run

RUN_COLUMNS = ["run_id", "name", "notes", "group_id", "group", "device", "precision", "target_val_loss", "target_step", "target_sec"]
ROW_COLUMNS = ["step", "train_loss", "val_loss", "lr", "tokens_per_sec", "tokens_seen", "elapsed_sec", "val_loss_full"]
EXPORT_COLUMNS = RUN_COLUMNS + ROW_COLUMNS + ["val_bpb"]  # val_bpb: val_loss in bits per byte of text
EXPORT_FORMATS = ("csv", "jsonl")
MAX_RUNS = 100
PAGE_ROWS = 5000


def parse_run_ids(values: list[str]) -> list[int]:
    """``ids=1,2,3`` or ``ids=1&ids=2`` (the run list's form): distinct positive ids, in order."""
    try:
        ids = [int(v) for value in values for v in value.split(",") if v.strip()]
    except ValueError:
        raise Invalid("ids must be comma-separated run ids", field="ids") from None
    if not ids:
        raise Invalid("give at least one run id", field="ids")
    if not all(1 <= i <= MAX_INT64 for i in ids):
        raise Invalid("run ids must be positive 64-bit integers", field="ids")
    ids = list(dict.fromkeys(ids))
    if len(ids) > MAX_RUNS:
        raise Invalid(f"at most {MAX_RUNS} runs per export", field="ids")
    return ids


def export_runs(session: Session, *, ids: list[int]) -> list[tuple[dict, float | None]]:
    """Each run's columns of the table and its validation bytes per token (404 for an unknown run, before
    anything is streamed)."""
    runs = [get_run(session, run_id=i) for i in ids]
    names = group_names(session, group_ids=(r.group_id for r in runs))
    return [({"run_id": r.id, "name": r.name, "notes": r.notes, "group_id": r.group_id,
              "group": names.get(r.group_id or ""), "device": r.device or r.requested_device,
              "precision": r.precision, "target_val_loss": r.target_val_loss, "target_step": r.target_step, "target_sec": r.target_sec},
             r.val_bytes_per_token) for r in runs]


def export_rows(settings: Settings, runs: list[tuple[dict, float | None]]) -> Iterator[dict]:
    """The rows, run by run and step by step, read a page at a time (keyset on the step)."""
    columns = [col(getattr(Metric, c)) for c in ROW_COLUMNS]
    for run, bytes_per_token in runs:
        after = (-1, 0)
        while True:
            with session_scope(settings) as session:
                page = session.exec(
                    select(*columns, col(Metric.id)).where(Metric.run_id == run["run_id"])
                    .where((col(Metric.step) > after[0]) | ((col(Metric.step) == after[0]) & (col(Metric.id) > after[1])))
                    .order_by(col(Metric.step), col(Metric.id)).limit(PAGE_ROWS)).all()
            for row in page:
                values = dict(zip(ROW_COLUMNS, row[:-1], strict=True))
                yield {**run, **values, "val_bpb": bits_per_byte(values["val_loss"], bytes_per_token)}
            if len(page) < PAGE_ROWS:
                break
            after = (page[-1][0], page[-1][-1])


def as_csv(rows: Iterator[dict]) -> Iterator[str]:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=EXPORT_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for i, row in enumerate(rows, 1):
        writer.writerow(row)  # None: an empty cell
        if i % 1000 == 0:
            yield buf.getvalue()
            buf.seek(0)
            buf.truncate()
    yield buf.getvalue()


def as_jsonl(rows: Iterator[dict]) -> Iterator[str]:
    lines: list[str] = []
    for row in rows:
        lines.append(json.dumps(row))
        if len(lines) == 1000:
            yield "\n".join(lines) + "\n"
            lines = []
    if lines:
        yield "\n".join(lines) + "\n"


