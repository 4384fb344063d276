"""Runs trained elsewhere: reported as they train (tinygpt train --report-to) or imported when finished."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal, Union

from pydantic import (
    ConfigDict,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from sqlmodel import Field, SQLModel

from tinygpt.device_names import check_device_name, check_precision_name
from tinygpt.records import HEAD_SCORES

from .alerts import Alert
from .common import InputModel
from .metrics import SERIES_NAME_MAX, MetricBase
from .runs import RunConfig, RunOrigin, RunStatus

# -- reported and imported runs (tinygpt train --report-to, tinygpt import) ----------------------------
MAX_INT32 = 2**31 - 1  # steps, parameter counts, journal numbers: 32-bit columns (PostgreSQL's integer)
MAX_INT62 = 2**62  # token counts: 64-bit columns
class MetricIn(MetricBase):
    """A metrics row sent by a trainer: finite numbers only (a NaN loss is the trainer's finding, sent as its
    status, never a row)."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="after")
    def _finite(self) -> MetricIn:
        for name, value in self:
            if isinstance(value, float) and not math.isfinite(value):
                raise PydanticCustomError("value_error", f"{name} must be a finite number, got {value}")
        for name, top in (("step", MAX_INT32), ("tokens_seen", MAX_INT62)):  # what the columns hold
            if getattr(self, name) is not None and not 0 <= getattr(self, name) <= top:
                raise PydanticCustomError("value_error", f"{name} must be in [0, {top}], got {getattr(self, name)}")
        return self


def bytes_per_token_field() -> Any:
    """A trainer's ``val_bytes_per_token`` (its validation text's bytes per token, for bits per byte)."""
    return Field(default=None, gt=0, le=1024, description="its validation text's bytes per token (bits per byte)")


class SampleIn(InputModel):
    step: int = Field(ge=0, le=MAX_INT32)
    prompt: str = Field(max_length=2000)
    text: str = Field(max_length=20_000)


class ReportedRunBase(InputModel):
    name: str = Field(min_length=1, max_length=200)
    tags: list[str] = Field(default_factory=list, max_length=50)
    host: str | None = Field(default=None, max_length=200, description="the machine it trains on")
    device: str = Field(default="auto", max_length=50, description="the device it was asked for (cpu, cuda, ...)")
    config: RunConfig = Field(description="its run options (the dataset is a label: the corpus is on its machine)")

    @field_validator("device")
    @classmethod
    def _device_name(cls, v: str) -> str:
        return check_device_name(v)


class ReportedRunCreate(ReportedRunBase):
    """POST /api/runs/reported: a run trained elsewhere that reports here. The same ``report_id`` twice
    is the same run (a retry whose answer was lost)."""

    report_id: str = Field(description="the trainer's id for the run (8-64 hex digits)")

    @field_validator("report_id")
    @classmethod
    def _hex_id(cls, v: str) -> str:
        if not re.fullmatch(r"[0-9a-f]{8,64}", v):
            raise ValueError("report_id must be 8-64 lowercase hex digits")
        return v


class ResolvedIn(InputModel):
    device: str = Field(max_length=50)
    device_info: dict = Field(default_factory=dict)
    precision: str
    params: int = Field(ge=0, le=MAX_INT32)
    start_step: int = Field(default=0, ge=0, le=MAX_INT32)
    resumed: bool = False
    target_val_loss: float | None = Field(default=None, ge=0, le=100, description="the target its trainer resolved")
    val_bytes_per_token: float | None = bytes_per_token_field()

    @field_validator("precision")
    @classmethod
    def _precision(cls, v: str) -> str:
        return check_precision_name(v)


#: The most heads a reported evaluation's scores may hold (layers x heads): bounded as the request is.
MAX_SCORED_HEADS = 4096


class HeadScoresIn(InputModel):
    """One evaluation's role scores of every head ({score: layers x heads}, ``tinygpt.records.HEAD_SCORES``)."""

    step: int = Field(ge=0, le=MAX_INT32)
    scores: dict[Literal[HEAD_SCORES], list[list[float]]] = Field(max_length=len(HEAD_SCORES))

    @field_validator("scores")
    @classmethod
    def _bounded(cls, v: dict[str, list[list[float]]]) -> dict[str, list[list[float]]]:
        for score, rows in v.items():
            if sum(len(row) for row in rows) > MAX_SCORED_HEADS:
                raise ValueError(f"{score}: at most {MAX_SCORED_HEADS} heads")
            if not all(math.isfinite(x) for row in rows for x in row):
                raise ValueError(f"{score}: scores are finite numbers")
        return v


class LogIn(InputModel):
    message: str = Field(max_length=2000)


class AlertIn(InputModel):
    kind: Literal[Alert.overfitting]
    message: str = Field(max_length=2000)


class EndIn(InputModel):
    status: Literal[RunStatus.succeeded, RunStatus.failed, RunStatus.cancelled]
    error: str | None = Field(default=None, max_length=5000)
    stop_reason: str | None = Field(default=None, max_length=2000)
    alert: Literal[Alert.nonfinite_loss] | None = None


def report_item(kind: str, data: type) -> type[SQLModel]:
    return create_model(f"{kind.capitalize()}Item", __base__=InputModel, seq=(int, Field(ge=1, le=MAX_INT32)),
                        kind=(Literal[kind], ...), data=(data, ...))


#: What a trainer's journal holds, item by item (``tinygpt/report.py``); a checkpoint is uploaded instead.
REPORT_ITEMS = {"start": ResolvedIn, "metric": MetricIn, "sample": SampleIn, "log": LogIn, "alert": AlertIn,
                "status": EndIn, "head_scores": HeadScoresIn}
ReportItem = Annotated[Union[tuple(report_item(k, v) for k, v in REPORT_ITEMS.items())],  # noqa: UP007
                       Field(discriminator="kind")]


class ReportBatch(InputModel):
    """POST /api/runs/{id}/report: journal items in order; each ``seq`` is applied once."""

    items: list[ReportItem] = Field(default_factory=list, max_length=1000)


class ReportAck(SQLModel):
    applied_seq: int = Field(description="the last item the dashboard holds: send from the next one")
    cancel_requested: bool = Field(description="someone asked the run to stop: stop at the next step")
    status: str


class RunImport(ReportedRunBase):
    """POST /api/runs/import: a finished run, its metrics in one request (its checkpoint after it, with
    PUT /api/runs/{id}/checkpoint)."""

    device_info: dict = Field(default_factory=dict, description='e.g. {"name": "NVIDIA H200"}')
    precision: str | None = None
    params: int | None = Field(default=None, ge=0, le=MAX_INT32)
    status: Literal[RunStatus.succeeded, RunStatus.failed, RunStatus.cancelled] = RunStatus.succeeded
    error: str | None = Field(default=None, max_length=5000)
    metrics: list[MetricIn] = Field(min_length=1, max_length=1_000_000)
    val_bytes_per_token: float | None = bytes_per_token_field()
    samples: list[SampleIn] = Field(default_factory=list, max_length=1000)

    @field_validator("precision")
    @classmethod
    def _precision(cls, v: str | None) -> str | None:
        return None if v is None else check_precision_name(v)


# -- another trainer's runs (tinygpt/foreign_logs.py: TensorBoard files, speedrun logs) ------------------------
#: The most values one foreign run brings in one request, and what one param may hold (MLflow's own bounds).
MAX_FOREIGN_POINTS = 1_000_000
MAX_PARAMS = 1000
PARAM_VALUE_MAX = 6000
ParamValue = Annotated[str, Field(max_length=PARAM_VALUE_MAX)] | int | float | bool | None


class ForeignPointIn(InputModel):
    """One value of another trainer's, under its own name."""

    name: str = Field(min_length=1, max_length=SERIES_NAME_MAX)
    step: int = Field(ge=0, le=MAX_INT62)
    value: float
    wall_time: float | None = Field(default=None, ge=0, le=1e11, description="seconds since the epoch")

    @field_validator("value")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError(f"value must be a finite number, got {v}")
        return v


class ForeignImport(InputModel):
    """POST /api/runs/import-foreign: a finished run of another trainer, as ``tinygpt import`` read its files: every
    value by its own name; the names that mean a run column (``tinygpt.metric_names``) fill its metrics rows."""

    name: str = Field(min_length=1, max_length=200)
    tags: list[str] = Field(default_factory=list, max_length=50)
    origin: Literal[RunOrigin.tensorboard, RunOrigin.log_file]
    source: str = Field(min_length=1, max_length=50, description="the format read: tensorboard, nanogpt, llmc, "
                        "modded-nanogpt")
    params: dict[Annotated[str, Field(min_length=1, max_length=SERIES_NAME_MAX)], ParamValue] = Field(
        default_factory=dict, max_length=MAX_PARAMS, description="its options as its script had them: the run's config")
    device: str | None = Field(default=None, max_length=50, description="the device it trained on (cpu, cuda, ...)")
    device_info: dict = Field(default_factory=dict, description='e.g. {"name": "NVIDIA H200"}')
    steps: int | None = Field(default=None, ge=0, le=MAX_INT32, description="its planned steps (default: the last)")
    tokens_per_step: int | None = Field(default=None, ge=1, le=MAX_INT32,
                                        description="tokens a step trains on, where the logs do not count tokens")
    target_val_loss: float | None = Field(default=None, gt=0, le=100, description="the validation loss whose first "
                                          "reaching is timed (none by default: its tokenizer is its own)")
    status: Literal[RunStatus.succeeded, RunStatus.failed, RunStatus.cancelled] = RunStatus.succeeded
    points: list[ForeignPointIn] = Field(min_length=1, max_length=MAX_FOREIGN_POINTS)

    @field_validator("device")
    @classmethod
    def _device_name(cls, v: str | None) -> str | None:
        return None if v is None else check_device_name(v)
