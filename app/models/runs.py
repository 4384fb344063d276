"""Runs: their statuses and kinds, the run options of the API (declared once, in the library), the table and
what the API shows of it."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from sqlalchemy import JSON, BigInteger, Column, Index, Text
from sqlmodel import Field, SQLModel

from tinygpt.device_names import check_device_name
from tinygpt.options import Option
from tinygpt.recipes import with_recipe
from tinygpt.records import bits_per_byte, reached_line
from tinygpt.run_config import MODEL_OVERRIDES, OPTIONS, TrainConfig

from ..redaction import shown_config
from ..settings import WebhookUrl, check_time_limit
from .alerts import Alert
from .common import InputModel, utcnow
from .groups import GROUP_ID_MAX


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
    mlflow = "mlflow"  # another trainer's script, reporting through MLflow's client (app/api/mlflow.py)
    wandb = "wandb"  # a W&B-style script, through the drop-in `wandb` module the dashboard ships (app/api/wandb.py)
    imported = "imported"  # a finished run folder or metrics CSV, brought in by `tinygpt import`
    # another trainer's run, by what it left (tinygpt/foreign_logs.py, brought in by `tinygpt import`)
    tensorboard = "tensorboard"  # its TensorBoard event files (SummaryWriter, tensorboardX)
    log_file = "log_file"  # its log (nanoGPT's train.py, llm.c's main.log, modded-nanogpt)


#: Runs whose trainer cannot be asked to stop: MLflow's protocol carries nothing back to its client.
UNSTOPPABLE = frozenset({RunOrigin.mlflow})
#: Scripts reporting through a tracking client's calls (no heartbeat of their own but their calls): ended crashed
#: after ``client_silent_sec`` without one, back to running when they call again. Each with what it is called.
TRACKING_CLIENTS = {RunOrigin.mlflow: "MLflow client", RunOrigin.wandb: "W&B-style drop-in"}


class Pool(enum.StrEnum):
    """Where a queued run goes to be trained: an executor of the dashboard (``TINYGPT_DEFAULT_POOL``)."""

    local = "local"  # this dashboard's workers (`tinygpt worker`)
    slurm = "slurm"  # jobs submitted to a Slurm cluster (`tinygpt slurm-executor`, TINYGPT_SLURM_*)


class RunSort(enum.StrEnum):
    """Orders of the run list: the newest first, or the best first by a figure (runs without it last)."""

    newest = "newest"
    best_val_loss = "best_val_loss"
    time_to_target = "time_to_target"  # training seconds to the target


class RunKind(enum.StrEnum):
    train = "train"
    benchmark = "benchmark"



class Notify(InputModel):
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


#: The run options of the API, one field per option of the library's declaration (tinygpt/run_config.py),
#: less the two the dashboard decides (the corpus is a dataset; the device is the worker's slot).
TRAINING_OPTIONS = {name: spec for name, spec in OPTIONS.items() if name != "device"}


#: The options that shape the model: the architecture and the preset's sizes and switches they override.
MODEL_SHAPERS = ("arch", *MODEL_OVERRIDES)
#: GET /api/model-size's query: a preset, its batch and the options that shape the model, each field the
#: library's declaration (an unknown one is refused, naming it).
ModelSizeQuery = create_model("ModelSizeQuery", __base__=InputModel,
                              **{name: option_field(TRAINING_OPTIONS[name])
                                 for name in ("preset", "batch_size", *MODEL_SHAPERS)})


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


def resolved_options(config: SQLModel) -> dict[str, Any]:
    """A run's options with every size, switch and rule left to its preset resolved (:meth:`TrainConfig.resolved`):
    what a run stores when it is submitted.

    >>> resolved_options(RunConfig(preset="tiny"))["d_model"], RunConfig(preset="tiny").d_model is None
    (64, True)
    """
    resolved = library_config(config).resolved().to_dict()
    return {name: resolved[name] for name in TRAINING_OPTIONS}


def _recipe_fills(data: Any) -> Any:
    """The options a body leaves out take its recipe's values (tinygpt/recipes.py), then their defaults."""
    return with_recipe(data) if isinstance(data, dict) else data


def _model_fits(config: SQLModel) -> SQLModel:
    """Sizes that do not fit together (heads that do not divide d_model, ...): the library's message, naming both."""
    try:
        library_config(config).model_config()
    except ValueError as exc:
        raise PydanticCustomError("value_error", str(exc)) from None
    return config


RunConfig = create_model(  # the validated training options of a run (POST /api/runs less name, tags, device)
    "RunConfig", __base__=InputModel, __doc__="The validated training options of a run.",
    __validators__={"gpus_split": field_validator("gpus")(_batch_splits_evenly),
                    "dataset_name": field_validator("dataset")(_dataset_name),
                    "recipe_fills": model_validator(mode="before")(_recipe_fills),
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


#: The most runs one submission makes (devices x seeds).
MAX_RUNS_AT_ONCE = 32
SEED_BOUNDS = (TRAINING_OPTIONS["seed"].ge, TRAINING_OPTIONS["seed"].le)


class RunCreate(RunConfig):
    """POST /api/runs. ``device`` may be a list: one run per device, same seed, one group; ``seeds`` repeats the
    run over seeds (a count from ``seed`` on, or a list): one run per seed and device, one group."""

    device: str | list[str] = "auto"
    seeds: int | list[int] | None = Field(default=None, description="repeat over seeds: a count (this run's seed "
                                          "and the next ones) or a list; one run per seed and device, one group")
    name: str | None = Field(default=None, min_length=1, max_length=200)
    tags: list[str] = Field(default_factory=list, max_length=50)
    pool: Pool | None = Field(default=None, description="where it trains: `local` (this dashboard's workers) or "
                              "`slurm` (a job on the Slurm cluster the settings name); default "
                              "TINYGPT_DEFAULT_POOL")
    time_limit: str | None = Field(default=None, description="the Slurm pool's job time limit for this run, "
                                   "minutes or [D-]HH:MM:SS (default TINYGPT_SLURM_TIME_LIMIT)")

    #: What places a run rather than trains it: not among its run options (``Run.config``).
    PLACEMENT: ClassVar[frozenset[str]] = frozenset({"device", "seeds", "name", "tags", "pool", "time_limit"})

    @field_validator("time_limit")
    @classmethod
    def _time_limit(cls, v: str | None) -> str | None:
        return check_time_limit(v)

    @field_validator("seeds")
    @classmethod
    def _seed_values(cls, v: int | list[int] | None) -> int | list[int] | None:
        if isinstance(v, int) and not 1 <= v <= MAX_RUNS_AT_ONCE:
            raise ValueError(f"a count of seeds must be 1 to {MAX_RUNS_AT_ONCE}, got {v}")
        if isinstance(v, list):
            if not 1 <= len(v) <= MAX_RUNS_AT_ONCE:
                raise ValueError(f"give 1 to {MAX_RUNS_AT_ONCE} seeds, got {len(v)}")
            if len(set(v)) != len(v):
                raise ValueError("each seed once: the same seed twice makes the same run")
            if any(not SEED_BOUNDS[0] <= s <= SEED_BOUNDS[1] for s in v):
                raise ValueError(f"seeds must be in [{SEED_BOUNDS[0]}, {SEED_BOUNDS[1]}]")
        return v

    @model_validator(mode="after")
    def _runs_at_once(self) -> RunCreate:
        count = len(self.devices()) * len(self.seed_list())
        if count > MAX_RUNS_AT_ONCE:
            raise ValueError(f"{len(self.devices())} devices x {len(self.seed_list())} seeds make {count} runs; at most "
                             f"{MAX_RUNS_AT_ONCE} at once")
        if self.seed_list()[-1] > SEED_BOUNDS[1]:
            raise ValueError(f"seeds must be in [{SEED_BOUNDS[0]}, {SEED_BOUNDS[1]}]")
        return self

    def seed_list(self) -> list[int]:
        """The seeds of the runs: ``seed`` alone, ``seeds`` of them from ``seed`` on, or the list given."""
        if self.seeds is None:
            return [self.seed]
        return list(self.seeds) if isinstance(self.seeds, list) else [self.seed + i for i in range(self.seeds)]

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


class RepeatRequest(InputModel):
    """POST /api/runs/{id}/repeat: a run's options again over more seeds."""

    seeds: int = Field(default=2, ge=1, le=MAX_RUNS_AT_ONCE, description="how many more seeds")


class RunUpdate(InputModel):
    name: str | None = Field(default=None, min_length=1, max_length=200)
    tags: list[str] | None = Field(default=None, max_length=50)
    notes: str | None = Field(default=None, max_length=20_000)
    group_id: str | None = Field(default=None, min_length=1, max_length=GROUP_ID_MAX, description="put runs together by hand: "
                                 "the compare page's group_by=group shows their spread")


class Run(SQLModel, table=True):
    __tablename__ = "runs"
    # AUTOINCREMENT on SQLite: the id of a deleted run is never handed out again
    __table_args__ = (Index("ix_runs_status_id", "status", "id"), {"sqlite_autoincrement": True})

    id: int | None = Field(default=None, primary_key=True)
    name: str
    kind: str = Field(default=RunKind.train)
    status: str = Field(default=RunStatus.queued, index=True)
    config: dict = Field(sa_column=Column(JSON, nullable=False))  # the options as submitted (unset: left open)
    # the training options as they were resolved at submission (TrainConfig.resolved): what it trains with, whatever a
    # later version's presets say; None for a run submitted before 0011 that never trains again (or not trained here)
    resolved_config: dict | None = Field(default=None, sa_column=Column(JSON))
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
    # time to target (tinygpt.records.TargetReached): the target its job resolved, and when it first reached it
    target_val_loss: float | None = None
    target_step: int | None = None
    target_tokens: int | None = Field(default=None, sa_type=BigInteger)
    target_sec: float | None = None  # training seconds
    target_exact: bool | None = None  # False: judged by the evaluation's estimate (rows without a whole-split loss)
    val_bytes_per_token: float | None = None  # its validation split's text bytes per token: bits per byte
    # where it trains (Pool); a Slurm run's job: its id, its last state and reason as squeue/scontrol told,
    # the batch script submitted, and the hash of the run-scoped token the job reports with
    pool: str = Field(default=Pool.local, index=True)
    time_limit: str | None = None
    slurm_job_id: str | None = None
    slurm_state: str | None = None
    slurm_reason: str | None = None
    job_script: str | None = Field(default=None, sa_column=Column(Text))
    job_token_hash: str | None = None
    prune_requested: bool = False  # a Slurm trial its sweep's pruner stopped: its end is ``pruned``
    client_tags: dict | None = Field(default=None, sa_column=Column(JSON))  # an MLflow client's run tags, key -> value

    @property
    def training_options(self) -> dict:
        """What the run trains with: its options resolved at submission, else (submitted before they were
        stored) as submitted."""
        return self.resolved_config or self.config


class RunWorkerPublic(SQLModel):
    """Where a run ran: the worker's name and its machine's host name (the device is in ``device_info``)."""

    name: str
    host: str | None


class TimeToTarget(SQLModel):
    """When a run's validation loss (over the whole split) first reached its target."""

    step: int
    tokens: int | None = Field(description="tokens seen by then (null: another trainer's run that does not say)")
    seconds: float | None = Field(description="training seconds to that evaluation (evaluations and samples "
                                  "excluded; null: not known)")
    exact: bool = Field(description="judged by the whole validation split (false: by the evaluation's estimate, for "
                        "rows that never measured it)")
    line: str = Field(description='in words, e.g. "reached 3.76 at step 1,120, 9.2M tokens, 1 h 51 min"')


def slurm_state_text(state: str | None, reason: str | None) -> str | None:
    """A job's state with the reason it waits, as pages and logs show it.

    >>> slurm_state_text("PENDING", "Resources"), slurm_state_text("RUNNING", None)
    ('PENDING (Resources)', 'RUNNING')
    """
    if state is None:
        return None
    return f"{state} ({reason})" if reason else state


class SlurmJobPublic(SQLModel):
    """A Slurm run's job as the scheduler last told it, and the batch script it runs."""

    id: str | None = Field(description="the job id (null: not submitted yet)")
    state: str | None = Field(description="PENDING, RUNNING, COMPLETED, TIMEOUT, ... (squeue/scontrol)")
    reason: str | None = Field(description="why a pending job waits (Resources, Priority, ...)")
    shown: str | None = Field(description='the state with its reason, e.g. "PENDING (Resources)"')
    time_limit: str | None = Field(description="its own time limit (null: TINYGPT_SLURM_TIME_LIMIT)")
    script: str | None = Field(description="the batch script submitted (no token in it)")


class RunPublic(SQLModel):
    id: int
    name: str
    kind: str
    status: str
    config: dict
    resolved_config: dict | None = Field(description="the training options as resolved when it was submitted: every "
                                         "size, switch and rule its preset and architecture left open (what it trains "
                                         "with); null for runs submitted before this was stored, and reported or "
                                         "imported runs")
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
    group_name: str | None = Field(default=None, description="its group's name (GET/PATCH /api/groups/{group_id})")
    attempt: int
    worker: RunWorkerPublic | None
    sweep_id: int | None
    trial: int | None
    disk_bytes: int
    stop_reason: str | None
    stalled_at: datetime | None
    origin: str
    stoppable: bool = Field(default=True, description="whether a cancel reaches its trainer (false: a client, such "
                            "as MLflow's, that cannot be asked to stop)")
    host: str | None  # the machine it trains (trained) on: its worker's, or the reporting trainer's
    client_tags: dict[str, str] = Field(default_factory=dict, description="what its tracking client tagged it with: "
                                        "MLflow's tags, a W&B-style script's program and summary.<key> values")
    target_val_loss: float | None = Field(description="the validation loss whose first reaching is timed")
    time_to_target: TimeToTarget | None = Field(description="when it first reached target_val_loss (null: not yet)")
    val_bytes_per_token: float | None = Field(description="its validation text's bytes per token")
    best_val_bpb: float | None = Field(description="best_val_loss in bits per byte: comparable across tokenizers")
    pool: str = Field(description="where it trains: local or slurm")
    slurm_job: SlurmJobPublic | None = Field(description="its Slurm job (the slurm pool only)")

    @classmethod
    def of(cls, run: Run, group_name: str | None = None) -> RunPublic:
        data: dict[str, Any] = run.model_dump()
        data["group_name"] = group_name
        data["config"] = shown_config(run.config)
        data["worker"] = {"name": run.worker, "host": run.worker_host} if run.worker else None
        data["host"] = run.worker_host
        data["client_tags"] = run.client_tags or {}
        # progress: training steps, or for a benchmark the number of cells (known once it starts)
        data["steps"] = int(run.config.get("cells" if run.kind == RunKind.benchmark else "steps", 0))
        data["has_checkpoint"] = bool(run.checkpoint_path)
        data["stoppable"] = run.origin not in UNSTOPPABLE
        data["time_to_target"] = None if run.target_step is None else {
            "step": run.target_step, "tokens": run.target_tokens, "seconds": run.target_sec,
            "exact": bool(run.target_exact), "line": reached_line(run.target_val_loss or 0, run.target_step,
                                                                  run.target_tokens, run.target_sec,
                                                                  exact=bool(run.target_exact))}
        data["best_val_bpb"] = bits_per_byte(run.best_val_loss, run.val_bytes_per_token)
        data["slurm_job"] = None if run.pool != Pool.slurm else {
            "id": run.slurm_job_id, "state": run.slurm_state, "reason": run.slurm_reason, "time_limit": run.time_limit,
            "shown": slurm_state_text(run.slurm_state, run.slurm_reason), "script": run.job_script}
        return cls.model_validate(data)


class RunsPage(SQLModel):
    items: list[RunPublic]
    total: int
    offset: int
    limit: int
