"""Metrics rows (the library's StepMetrics as a table), their block summaries, and samples."""

from __future__ import annotations

import math
from dataclasses import MISSING, fields
from datetime import datetime
from typing import Any, get_type_hints

from pydantic import (
    create_model,
)
from sqlalchemy import BigInteger, Index, Text, text
from sqlmodel import Field, SQLModel

from tinygpt.records import Sample as TrainSample
from tinygpt.records import StepMetrics

from .common import utcnow


# -- metrics, samples, events -----------------------------------------------------------------
def library_record(name: str, record: type, **sql_types: Any) -> type[SQLModel]:
    """A SQLModel base with the fields of a library dataclass, declared there once. ``sql_types``:
    a field's column type where the default does not do (long text, 64-bit counts)."""
    hints = get_type_hints(record)

    def field(f: Any) -> Any:  # required unless the dataclass gives a default
        default = ... if f.default is MISSING else f.default
        return Field(default=default, sa_type=sql_types[f.name]) if f.name in sql_types else default

    return create_model(name, __base__=SQLModel, __doc__=f"The fields of tinygpt's {record.__name__}.",
                        **{f.name: (hints[f.name], field(f)) for f in fields(record)})


# billions of tokens on a GPU run: past a 32-bit integer
MetricBase = library_record("MetricBase", StepMetrics, tokens_seen=BigInteger)


class Metric(MetricBase, table=True):
    __tablename__ = "metrics"
    # the evaluation rows have their own (partial) index: a chart keeps every one of them, read without a scan
    __table_args__ = (Index("ix_metrics_run_step", "run_id", "step"),
                      Index("ix_metrics_run_eval_step", "run_id", "step", sqlite_where=text("val_loss IS NOT NULL"),
                            postgresql_where=text("val_loss IS NOT NULL")))

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", ondelete="CASCADE")


class MetricPublic(MetricBase):
    pass


class MetricBlock(SQLModel, table=True):
    """The steps of one run in one block of ``BLOCK_STEPS[level]`` steps, summed up: their count, first and last
    step, lowest and highest training loss. Kept as rows are written (``app/services/metric_blocks.py``), so a
    thinned chart of a million rows reads a few thousand blocks instead of every row."""

    __tablename__ = "metric_blocks"

    run_id: int = Field(foreign_key="runs.id", primary_key=True, ondelete="CASCADE")
    level: int = Field(primary_key=True)
    block: int = Field(primary_key=True)  # step // BLOCK_STEPS[level]
    first_step: int
    last_step: int
    rows: int
    min_train_loss: float | None = None
    max_train_loss: float | None = None


#: The longest metric name kept (MLflow's own bound on a metric key).
SERIES_NAME_MAX = 250


class SeriesPoint(SQLModel, table=True):
    """A value another trainer logged, under its own name (every one, mapped onto a run column or not: what its
    file or client said, so nothing is dropped and its client reads back what it wrote). One per name and step:
    a value logged again at the same step replaces the earlier. The names that mean a run column also fill the
    run's metrics rows (``tinygpt.metric_names``)."""

    __tablename__ = "metric_series"

    run_id: int = Field(foreign_key="runs.id", primary_key=True, ondelete="CASCADE")
    name: str = Field(primary_key=True, max_length=SERIES_NAME_MAX)
    step: int = Field(primary_key=True, sa_type=BigInteger)
    value: float  # 0 where is_nan (SQLite keeps no NaN: it would read back NULL)
    is_nan: bool = False  # a NaN logged (MLflow's clients may log one: a diverged run), as MLflow's own store keeps it
    wall_time: float | None = None  # seconds since the epoch, where the trainer said

    @property
    def logged_value(self) -> float:
        return math.nan if self.is_nan else self.value


class SeriesPublic(SQLModel):
    """A run's series of one name (GET /api/runs/{id}/series)."""

    name: str
    column: str | None = Field(description="the run column this name fills (tinygpt.metric_names), null: its own")
    steps: list[int]
    values: list[float | None] = Field(description="null: a NaN logged; infinities as logged")
    wall_times: list[float | None]


class MetricColumns(SQLModel):
    """A run's metrics as one list per field (``GET /api/runs/{id}/metrics?format=columns``)."""

    run_id: int
    rows: int = Field(description="rows in the step range (before thinning)")
    downsampled: bool
    last_event_id: int = Field(description="the run's newest event when this was read: stream from there")
    overfit: dict = Field(description="its overfitting verdict then (tinygpt.records.OverfitWatch): best_step, "
                          "best_val_loss, since (the first evaluation above the best; null: not overfitting)")
    columns: dict[str, list[float | int | None]]


SampleBase = library_record("SampleBase", TrainSample, prompt=Text, text=Text)


class Sample(SampleBase, table=True):
    __tablename__ = "samples"

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", index=True, ondelete="CASCADE")
    created_at: datetime = Field(default_factory=utcnow)


class SamplePublic(SampleBase):
    created_at: datetime
