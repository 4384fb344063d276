"""Tables and API models. Per entity: Base (shared fields), Create/Update (input), the table,
Public (output), so internal fields (worker, pid, paths, cancel flags) never leak."""

from __future__ import annotations

import enum
import math
import re
from dataclasses import fields
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Union, get_type_hints

from pydantic import AfterValidator, ValidationInfo, create_model, field_validator, model_validator
from pydantic_core import PydanticCustomError
from sqlalchemy import JSON, BigInteger, Column, Index, Text, UniqueConstraint, text
from sqlmodel import Field, SQLModel

from tinygpt.device import check_device_name, check_precision_name
from tinygpt.options import Option
from tinygpt.train import OPTIONS, StepMetrics, TrainConfig
from tinygpt.train import Sample as TrainSample

from .settings import WebhookUrl


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(moment: datetime) -> datetime:
    """SQLite hands datetimes back without their zone; they were written in UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class RunStatus(enum.StrEnum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"
    crashed = "crashed"
    pruned = "pruned"  # a sweep's trial stopped early by the sweep's pruner: metrics and best checkpoint kept

    @property
    def finished(self) -> bool:
        return self in FINISHED


FINISHED = {RunStatus.succeeded, RunStatus.failed, RunStatus.cancelled, RunStatus.crashed, RunStatus.pruned}


class RunOrigin(enum.StrEnum):
    """Where a run was trained."""

    dashboard = "dashboard"  # queued here, trained by a worker
    reported = "reported"  # trained elsewhere by `tinygpt train --report-to`, streamed here as it trains
    imported = "imported"  # a finished run folder or metrics CSV, brought in by `tinygpt import`


class RunKind(enum.StrEnum):
    train = "train"
    benchmark = "benchmark"


class Alert(enum.StrEnum):
    """What a webhook (and the page's desktop notification) can tell: ``alert`` events' ``kind``."""

    finished = "finished"  # succeeded
    failed = "failed"
    crashed = "crashed"
    pruned = "pruned"
    stopped_early = "stopped_early"  # succeeded before its last step: early stopping
    nonfinite_loss = "nonfinite_loss"  # failed: NaN or infinite loss or gradient norm
    overfitting = "overfitting"  # validation loss above its best for 2 evaluations in a row
    stalled = "stalled"  # no step for max(stall_after_sec, 10 x the median step time)
    sweep_finished = "sweep_finished"


class Notify(SQLModel, extra="forbid"):
    """A run's notifications: which alerts go to the webhooks (the settings' and these ``urls``)."""

    events: list[Alert] = Field(default_factory=lambda: list(Alert), max_length=len(Alert),
                                description="alerts to send; default all")
    urls: list[WebhookUrl] = Field(default_factory=list, max_length=5, description="more webhook URLs for this "
                                   "run (http or https), besides TINYGPT_WEBHOOK_URLS")


# -- runs -----------------------------------------------------------------------------------
def option_field(spec: Option) -> tuple[Any, Any]:
    """A pydantic field for a run option: its type, default and description, its bounds and choices in the
    OpenAPI schema, and the library's own check (so a bad value gets the library's message, naming it)."""

    def check(value: Any) -> Any:
        try:
            return spec.check(value)
        except ValueError as exc:
            raise PydanticCustomError("value_error", str(exc)) from None

    kind = spec.kind | None if spec.none is not None else spec.kind
    schema = {k: v for k, v in {"minimum": spec.ge, "exclusiveMinimum": spec.gt, "maximum": spec.le,
                                "exclusiveMaximum": spec.lt, "enum": list(spec.choices) if spec.choices else None,
                                "maxLength": spec.max_length, "x-group": spec.group, "x-unit": spec.unit,
                                "x-advanced": spec.advanced or None}.items() if v is not None}
    description = spec.help + (f" (unset: {spec.none})" if spec.none else "")
    return Annotated[kind, AfterValidator(check)], Field(default=spec.default, description=description,
                                                         schema_extra={"json_schema_extra": schema})


#: The run options of the API, one field per option of the library's declaration (tinygpt/train.py),
#: less the two the dashboard decides (the corpus is a dataset; the device is the worker's slot).
TRAINING_OPTIONS = {name: spec for name, spec in OPTIONS.items() if name != "device"}


def _batch_splits_evenly(v: int, info: ValidationInfo) -> int:
    batch = info.data.get("batch_size")
    if batch is not None and batch % v:
        raise ValueError(f"batch_size {batch} must divide evenly over {v} processes")
    return v


def _dataset_name(v: str) -> str:
    if not v or len(v) > 100:
        raise ValueError("dataset name must be 1-100 characters")
    return v


def library_config(config: SQLModel) -> TrainConfig:
    """The library's ``TrainConfig`` of a run's validated options (corpus left to the job)."""
    return TrainConfig(**{name: getattr(config, name) for name in TRAINING_OPTIONS})


def _model_fits(config: SQLModel) -> SQLModel:
    """Sizes that do not fit together (heads that do not divide d_model, ...): the library's message, naming both."""
    try:
        library_config(config).model_config()
    except ValueError as exc:
        raise PydanticCustomError("value_error", str(exc)) from None
    return config


RunConfig = create_model(  # the validated training options of a run (POST /api/runs less name, tags, device)
    "RunConfig", __base__=SQLModel, __doc__="The validated training options of a run.",
    __validators__={"gpus_split": field_validator("gpus")(_batch_splits_evenly),
                    "dataset_name": field_validator("dataset")(_dataset_name),
                    "model_fits": model_validator(mode="after")(_model_fits)},
    **{name: option_field(spec) for name, spec in TRAINING_OPTIONS.items()},
    # what the dashboard adds to the library's options
    dataset=(str, Field(default="holmes", description="a dataset's name (GET /api/datasets)")),
    gpus=(int, Field(default=1, ge=1, le=64, description="processes training together (DistributedDataParallel, "
                     "launched by torchrun): one per GPU, or gloo processes on the CPU; the batch is split among "
                     "them")),
    resume=(bool, Field(default=True, description="resume from the last checkpoint after a crash")),
    notify=(Notify, Field(default_factory=Notify, description="alerts sent to webhooks")),
)


class RunCreate(RunConfig):
    """POST /api/runs. ``device`` may be a list: one run per device, same seed, one group."""

    device: str | list[str] = "auto"
    name: str | None = Field(default=None, min_length=1, max_length=200)
    tags: list[str] = Field(default_factory=list, max_length=50)

    @field_validator("device")
    @classmethod
    def _device_names(cls, v: str | list[str]) -> str | list[str]:
        names = [v] if isinstance(v, str) else v
        if not names:
            raise ValueError("give at least one device")
        if len(names) > 8:
            raise ValueError("at most 8 devices at once")
        checked = [check_device_name(n) for n in names]
        return checked[0] if isinstance(v, str) else checked

    @field_validator("tags")
    @classmethod
    def _tag_lengths(cls, v: list[str]) -> list[str]:
        for tag in v:
            if not 1 <= len(tag) <= 50:
                raise ValueError("each tag must be 1-50 characters")
        return v

    def devices(self) -> list[str]:
        return [self.device] if isinstance(self.device, str) else list(self.device)


class RunUpdate(SQLModel):
    name: str | None = Field(default=None, min_length=1, max_length=200)
    tags: list[str] | None = Field(default=None, max_length=50)
    notes: str | None = Field(default=None, max_length=20_000)


class Run(SQLModel, table=True):
    __tablename__ = "runs"
    # AUTOINCREMENT on SQLite: the id of a deleted run is never handed out again
    __table_args__ = (Index("ix_runs_status_id", "status", "id"), {"sqlite_autoincrement": True})

    id: int | None = Field(default=None, primary_key=True)
    name: str
    kind: str = Field(default=RunKind.train)
    status: str = Field(default=RunStatus.queued, index=True)
    config: dict = Field(sa_column=Column(JSON, nullable=False))
    requested_device: str = "auto"
    device: str | None = None
    device_info: dict | None = Field(default=None, sa_column=Column(JSON))
    precision: str | None = None
    params: int | None = None
    worker: str | None = None
    worker_host: str | None = None
    pid: int | None = None
    attempt: int = 0
    cancel_requested: bool = False
    created_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    heartbeat_at: datetime | None = None
    error: str | None = Field(default=None, sa_column=Column(Text))
    last_step: int = 0
    best_val_loss: float | None = None
    best_step: int | None = None
    checkpoint_path: str | None = None
    out_dir: str | None = None
    tags: list = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    notes: str = ""
    group_id: str | None = Field(default=None, index=True)
    sweep_id: int | None = Field(default=None, foreign_key="sweeps.id", index=True, ondelete="SET NULL")
    trial: int | None = None  # the trial's number in its sweep's study
    disk_bytes: int = Field(default=0, sa_type=BigInteger)  # the run's files (checkpoints, logs), as last counted
    stop_reason: str | None = None  # early stopping: why it ended before its last step
    progress_at: datetime | None = None  # when its step last advanced (written by its job)
    step_sec: float | None = None  # median seconds per step lately (written by its job)
    stalled_at: datetime | None = None  # set while no step came for too long (see worker.stalls)
    origin: str = Field(default=RunOrigin.dashboard)
    report_id: str | None = Field(default=None, unique=True, index=True)  # a reported run's id on its trainer's side
    report_seq: int = 0  # a reported run: the last journal item applied (each is applied once)
    events_trimmed_to: int = 0  # the newest of its ``metric`` events deleted from the outbox (0: none yet)
    tokens_per_sec: float | None = None  # the median over its rows, stored when it finishes (runs.run_rate)


class RunWorkerPublic(SQLModel):
    """Where a run ran: the worker's name and its machine's host name (the device is in ``device_info``)."""

    name: str
    host: str | None


class RunPublic(SQLModel):
    id: int
    name: str
    kind: str
    status: str
    config: dict
    requested_device: str
    device: str | None
    device_info: dict | None
    precision: str | None
    params: int | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    heartbeat_at: datetime | None
    error: str | None
    last_step: int
    steps: int
    best_val_loss: float | None
    best_step: int | None
    has_checkpoint: bool
    tags: list[str]
    notes: str
    group_id: str | None
    attempt: int
    worker: RunWorkerPublic | None
    sweep_id: int | None
    trial: int | None
    disk_bytes: int
    stop_reason: str | None
    stalled_at: datetime | None
    origin: str
    host: str | None  # the machine it trains (trained) on: its worker's, or the reporting trainer's

    @classmethod
    def of(cls, run: Run) -> RunPublic:
        data: dict[str, Any] = run.model_dump()
        data["worker"] = {"name": run.worker, "host": run.worker_host} if run.worker else None
        data["host"] = run.worker_host
        # progress: training steps, or for a benchmark the number of cells (known once it starts)
        data["steps"] = int(run.config.get("cells" if run.kind == RunKind.benchmark else "steps", 0))
        data["has_checkpoint"] = bool(run.checkpoint_path)
        return cls.model_validate(data)


class RunsPage(SQLModel):
    items: list[RunPublic]
    total: int
    offset: int
    limit: int


# -- sweeps ----------------------------------------------------------------------------------------
class SweepStatus(enum.StrEnum):
    running = "running"
    finished = "finished"
    cancelled = "cancelled"


SWEEP_ENDED = {SweepStatus.finished, SweepStatus.cancelled}
SWEEP_METHODS = ("grid", "random", "bayes")  # bayes: Optuna's TPE
SWEEP_METRICS = {  # the objective, always minimised
    "val_loss": "the best validation loss of the run",
    "final_val_loss": "the validation loss at the run's last evaluation",
    "train_loss": "the training loss at the run's last evaluation",
}
PARAMETER_DISTRIBUTIONS = ("categorical", "constant", "uniform", "int_uniform", "log_uniform_values", "q_uniform")
EARLY_TERMINATE = ("hyperband", "median")


class SweepMetric(SQLModel):
    name: str = Field(default="val_loss", description=", ".join(f"{k}: {v}" for k, v in SWEEP_METRICS.items()))
    goal: str = Field(default="minimize", description="losses are minimised")

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in SWEEP_METRICS:
            raise ValueError(f"metric must be one of {', '.join(SWEEP_METRICS)}")
        return v

    @field_validator("goal")
    @classmethod
    def _minimise(cls, v: str) -> str:
        if v != "minimize":
            raise ValueError("goal must be 'minimize': the metrics are losses")
        return v


class SweepParameter(SQLModel, extra="forbid"):
    """One option to vary, as in a W&B sweep: ``value``, ``values``, or ``min``/``max`` with a ``distribution``."""

    value: Any = None
    values: list[Any] | None = Field(default=None, min_length=1, max_length=100)
    min: float | None = None
    max: float | None = None
    distribution: str | None = Field(default=None, description=", ".join(PARAMETER_DISTRIBUTIONS))
    q: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_form(self) -> SweepParameter:
        forms = [self.value is not None, self.values is not None, self.min is not None or self.max is not None]
        if sum(forms) != 1:
            raise ValueError("give exactly one of value, values, or min and max")
        if forms[2] and (self.min is None or self.max is None or self.min >= self.max):
            raise ValueError("a range needs min < max")
        if self.distribution is not None and self.distribution not in PARAMETER_DISTRIBUTIONS:
            raise ValueError(f"distribution must be one of {', '.join(PARAMETER_DISTRIBUTIONS)}")
        if self.distribution == "log_uniform_values" and forms[2] and self.min <= 0:
            raise ValueError("log_uniform_values needs min > 0")
        if self.distribution == "q_uniform" and self.q is None:
            raise ValueError("q_uniform needs q")
        return self


class SweepEarlyTerminate(SQLModel, extra="forbid"):
    """Stop hopeless trials early; iterations are evaluations (``eval_every`` steps each)."""

    type: str = Field(description="hyperband (W&B's meaning: asynchronous successive halving, Optuna's "
                                  "SuccessiveHalvingPruner) or median (MedianPruner)")
    min_iter: int = Field(default=1, ge=1, le=10_000, description="evaluations every trial gets before it may be pruned")
    eta: int = Field(default=3, ge=2, le=10, description="hyperband's reduction factor")

    @field_validator("type")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in EARLY_TERMINATE:
            raise ValueError(f"early_terminate type must be one of {', '.join(EARLY_TERMINATE)}")
        return v


class SweepCreate(SQLModel, extra="forbid"):
    """POST /api/sweeps: a W&B sweep configuration (method, metric, parameters, early_terminate,
    run_cap) plus ``base`` (the run options every trial starts from), ``parallel`` and labels."""

    method: str = Field(description="grid, random or bayes (TPE)")
    metric: SweepMetric = Field(default_factory=SweepMetric)
    parameters: dict[str, SweepParameter] = Field(min_length=1, max_length=30)
    early_terminate: SweepEarlyTerminate | None = None
    run_cap: int | None = Field(default=None, ge=1, le=1000, description="trials at most (grid: default the whole grid)")
    base: dict[str, Any] = Field(default_factory=dict, description="run options every trial starts from (POST /api/runs)")
    parallel: int = Field(default=2, ge=1, le=64, description="trials queued or running at once")
    seed: int = Field(default=0, ge=0, le=2**32 - 1, description="the sampler's seed: the same seed, the same trials")
    keep_checkpoints: int = Field(default=5, ge=0, le=1000, description="best.pt kept for this many top trials")
    name: str | None = Field(default=None, min_length=1, max_length=200)
    tags: list[str] = Field(default_factory=list, max_length=50)
    description: str | None = Field(default=None, max_length=2000)

    @field_validator("method")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in SWEEP_METHODS:
            raise ValueError(f"method must be one of {', '.join(SWEEP_METHODS)}")
        return v


class Sweep(SQLModel, table=True):
    __tablename__ = "sweeps"
    __table_args__ = ({"sqlite_autoincrement": True},)

    id: int | None = Field(default=None, primary_key=True)
    name: str
    status: str = Field(default=SweepStatus.running, index=True)
    config: dict = Field(sa_column=Column(JSON, nullable=False))  # the SweepCreate, as validated
    tags: list = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    trials_planned: int  # run_cap, or the grid's size
    created_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime | None = None
    filled_at: datetime = Field(default_factory=utcnow)  # written to take the sweep's lock before adding trials


class SweepPublic(SQLModel):
    id: int
    name: str
    status: str
    config: dict
    tags: list[str]
    trials_planned: int
    created_at: datetime
    finished_at: datetime | None
    counts: dict[str, int]  # trials by status
    disk_bytes: int


class TrialPublic(SQLModel):
    run_id: int
    trial: int
    name: str
    status: str
    params: dict[str, Any]
    last_step: int
    steps: int
    best_val_loss: float | None
    objective: float | None
    tokens_per_sec: float | None
    has_checkpoint: bool
    disk_bytes: int


class SweepDetail(SweepPublic):
    trials: list[TrialPublic]
    best: TrialPublic | None
    importance: dict[str, float] | None  # once enough trials have finished


# -- workers ---------------------------------------------------------------------------------------
class WorkerRecord(SQLModel, table=True):
    """A worker process, registered while it runs: its name is unique among live workers, and its host
    and pid tell whether it is still alive (see ``worker/registry.py``)."""

    __tablename__ = "workers"

    name: str = Field(primary_key=True)
    host: str
    pid: int
    devices: list = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    started_at: datetime = Field(default_factory=utcnow)
    heartbeat_at: datetime = Field(default_factory=utcnow)
    stopped_at: datetime | None = None


# -- metrics, samples, events -----------------------------------------------------------------
def library_record(name: str, record: type, **sql_types: Any) -> type[SQLModel]:
    """A SQLModel base with the fields of a library dataclass, declared there once. ``sql_types``:
    a field's column type where the default does not do (long text, 64-bit counts)."""
    hints = get_type_hints(record)
    return create_model(name, __base__=SQLModel, __doc__=f"The fields of tinygpt's {record.__name__}.",
                        **{f.name: (hints[f.name], Field(sa_type=sql_types[f.name]) if f.name in sql_types else ...)
                           for f in fields(record)})


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


class MetricColumns(SQLModel):
    """A run's metrics as one list per field (``GET /api/runs/{id}/metrics?format=columns``)."""

    run_id: int
    rows: int = Field(description="rows in the step range (before thinning)")
    downsampled: bool
    last_event_id: int = Field(description="the run's newest event when this was read: stream from there")
    columns: dict[str, list[float | int | None]]


SampleBase = library_record("SampleBase", TrainSample, prompt=Text, text=Text)


class Sample(SampleBase, table=True):
    __tablename__ = "samples"

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", index=True, ondelete="CASCADE")
    created_at: datetime = Field(default_factory=utcnow)


class SamplePublic(SampleBase):
    created_at: datetime


class EventType(enum.StrEnum):
    created = "created"
    status = "status"
    metric = "metric"
    sample = "sample"
    log = "log"
    resolved = "resolved"  # what a run's job resolved: device, its description, precision, parameters
    best_checkpoint = "best_checkpoint"  # a new best checkpoint: step and validation loss
    trial = "trial"  # on a sweep's stream: a trial created, evaluated, pruned or finished
    sweep = "sweep"  # on a sweep's stream: the sweep's status changed (its end)
    alert = "alert"  # something to tell people (``Alert``): the webhooks' outbox
    stall = "stall"  # a run stalled (``stalled``: true) or moves again (false)


class DeliveryState(enum.StrEnum):
    pending = "pending"  # to send (again) at next_at
    sending = "sending"  # taken by a notifier; never sent twice, even if it died while sending
    sent = "sent"
    failed = "failed"  # gave up after WEBHOOK_ATTEMPTS tries, or its notifier died mid-send


class WebhookDelivery(SQLModel, table=True):
    """One alert (an ``alert`` event) to one webhook URL: at most one POST succeeds per pair."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (UniqueConstraint("event_id", "url", name="uq_webhook_deliveries_event_url"),
                      Index("ix_webhook_deliveries_state_next_at", "state", "next_at"))

    id: int | None = Field(default=None, primary_key=True)
    event_id: int = Field(index=True)
    url: str
    state: str = Field(default=DeliveryState.pending)
    attempts: int = 0
    next_at: datetime = Field(default_factory=utcnow)
    sent_at: datetime | None = None
    last_error: str | None = Field(default=None, sa_column=Column(Text))


class Event(SQLModel, table=True):
    """Append-only outbox: every change anyone may watch, in order. Its id is the SSE event id."""

    __tablename__ = "events"
    # event ids only ever grow (Last-Event-ID relies on it), even after the newest events are deleted
    __table_args__ = (Index("ix_events_run_id_id", "run_id", "id"),
                      Index("ix_events_type_created_at", "type", "created_at"),  # the outbox's compaction
                      {"sqlite_autoincrement": True})

    id: int | None = Field(default=None, primary_key=True)
    run_id: int | None = Field(default=None)
    sweep_id: int | None = Field(default=None, index=True)
    type: str
    data: dict = Field(sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow)


# -- datasets and benchmarks -------------------------------------------------------------------
class Dataset(SQLModel, table=True):
    __tablename__ = "datasets"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(unique=True, index=True)
    sha256: str
    bytes: int = Field(sa_type=BigInteger)
    chars: int = Field(sa_type=BigInteger)
    path: str
    builtin: bool = False
    tokenizers: list = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow)


class DatasetPublic(SQLModel):
    name: str
    sha256: str
    bytes: int
    chars: int
    builtin: bool
    tokenizers: list
    created_at: datetime


class BenchmarkCreate(SQLModel):
    """POST /api/benchmarks: a sweep over batch sizes x precisions (x CPU thread counts) for one device."""

    preset: str = "holmes"
    arch: str | None = None
    device: str = "auto"
    batch_sizes: list[int] = Field(default_factory=lambda: [8, 16, 32], min_length=1, max_length=12)
    precisions: list[str] | None = Field(default=None, max_length=4, description="default: what the device supports")
    threads: list[int] | None = Field(default=None, max_length=12, description="CPU thread counts (CPU only)")
    steps: int = Field(default=5, ge=1, le=100, description="timed steps per cell")
    warmup: int = Field(default=2, ge=0, le=20, description="untimed steps per cell")
    name: str | None = Field(default=None, max_length=200)
    tags: list[str] = Field(default_factory=list, max_length=50)

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, v: str) -> str:
        return OPTIONS["preset"].check(v)

    @field_validator("arch")
    @classmethod
    def _known_arch(cls, v: str | None) -> str | None:
        return OPTIONS["arch"].check(v)

    @field_validator("device")
    @classmethod
    def _device_name(cls, v: str) -> str:
        return check_device_name(v)

    @field_validator("batch_sizes")
    @classmethod
    def _batch_sizes(cls, v: list[int]) -> list[int]:
        if any(not 1 <= b <= 4096 for b in v):
            raise ValueError("each batch size must be in [1, 4096]")
        return v

    @field_validator("precisions")
    @classmethod
    def _precisions(cls, v: list[str] | None) -> list[str] | None:
        for p in v or []:
            check_precision_name(p)
        return v

    @field_validator("threads")
    @classmethod
    def _threads(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and any(not 1 <= t <= 1024 for t in v):
            raise ValueError("each thread count must be in [1, 1024]")
        return v


class BenchmarkResult(SQLModel, table=True):
    __tablename__ = "benchmark_results"

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", index=True, ondelete="CASCADE")
    preset: str
    device: str
    precision: str
    batch_size: int
    threads: int | None = None
    tokens_per_sec: float | None = None
    ms_per_step: float | None = None
    peak_mem_mib: float | None = None
    oom: bool = False


class BenchmarkCellPublic(SQLModel):
    precision: str
    batch_size: int
    threads: int | None
    tokens_per_sec: float | None
    ms_per_step: float | None
    peak_mem_mib: float | None
    oom: bool


class BenchmarkPublic(SQLModel):
    """A benchmark run and the cells measured so far."""

    run: RunPublic
    preset: str
    cells: list[BenchmarkCellPublic]


# -- reported and imported runs (tinygpt train --report-to, tinygpt import) ----------------------------
MAX_INT32 = 2**31 - 1  # steps, parameter counts, journal numbers: 32-bit columns (PostgreSQL's integer)
MAX_INT62 = 2**62  # token counts: 64-bit columns
class MetricIn(MetricBase):
    """A metrics row sent by a trainer: finite numbers only (a NaN loss is the trainer's finding, sent as its
    status, never a row)."""

    @model_validator(mode="after")
    def _finite(self) -> MetricIn:
        for name, value in self:
            if isinstance(value, float) and not math.isfinite(value):
                raise PydanticCustomError("value_error", f"{name} must be a finite number, got {value}")
        for name, top in (("step", MAX_INT32), ("tokens_seen", MAX_INT62)):  # what the columns hold
            if not 0 <= getattr(self, name) <= top:
                raise PydanticCustomError("value_error", f"{name} must be in [0, {top}], got {getattr(self, name)}")
        return self


class SampleIn(SQLModel):
    step: int = Field(ge=0, le=MAX_INT32)
    prompt: str = Field(max_length=2000)
    text: str = Field(max_length=20_000)


class ReportedRunBase(SQLModel, extra="forbid"):
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


class ResolvedIn(SQLModel):
    device: str = Field(max_length=50)
    device_info: dict = Field(default_factory=dict)
    precision: str
    params: int = Field(ge=0, le=MAX_INT32)
    start_step: int = Field(default=0, ge=0, le=MAX_INT32)
    resumed: bool = False

    @field_validator("precision")
    @classmethod
    def _precision(cls, v: str) -> str:
        return check_precision_name(v)


class LogIn(SQLModel):
    message: str = Field(max_length=2000)


class AlertIn(SQLModel):
    kind: Literal[Alert.overfitting]
    message: str = Field(max_length=2000)


class EndIn(SQLModel):
    status: Literal[RunStatus.succeeded, RunStatus.failed, RunStatus.cancelled]
    error: str | None = Field(default=None, max_length=5000)
    stop_reason: str | None = Field(default=None, max_length=2000)
    alert: Literal[Alert.nonfinite_loss] | None = None


def report_item(kind: str, data: type) -> type[SQLModel]:
    return create_model(f"{kind.capitalize()}Item", __base__=SQLModel, seq=(int, Field(ge=1, le=MAX_INT32)),
                        kind=(Literal[kind], ...), data=(data, ...))


#: What a trainer's journal holds, item by item (``tinygpt/report.py``); a checkpoint is uploaded instead.
REPORT_ITEMS = {"start": ResolvedIn, "metric": MetricIn, "sample": SampleIn, "log": LogIn, "alert": AlertIn,
                "status": EndIn}
ReportItem = Annotated[Union[tuple(report_item(k, v) for k, v in REPORT_ITEMS.items())],  # noqa: UP007
                       Field(discriminator="kind")]


class ReportBatch(SQLModel):
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
    samples: list[SampleIn] = Field(default_factory=list, max_length=1000)

    @field_validator("precision")
    @classmethod
    def _precision(cls, v: str | None) -> str | None:
        return None if v is None else check_precision_name(v)
