"""Sweeps: the W&B-style configuration, the table, and what the API shows of a sweep and its trials."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, field_validator, model_validator
from sqlalchemy import JSON, Column
from sqlmodel import Field, SQLModel

from .common import InputModel, utcnow


def one_of(what: str, choices: Iterable[str]) -> AfterValidator:
    """A text field's check against its choices: "method must be one of grid, random, bayes"."""
    names = tuple(choices)

    def check(value: str) -> str:
        if value not in names:
            raise ValueError(f"{what} must be one of {', '.join(names)}")
        return value

    return AfterValidator(check)


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
    "time_to_target": "training seconds until the validation loss first reached the run's target_val_loss (a "
                      "trial that never reaches it ranks after every one that does, the closer first)",
}
PARAMETER_DISTRIBUTIONS = ("categorical", "constant", "uniform", "int_uniform", "log_uniform_values", "q_uniform")
EARLY_TERMINATE = ("hyperband", "median")


class SweepMetric(InputModel):
    name: Annotated[str, one_of("metric", SWEEP_METRICS)] = Field(
        default="val_loss", description=", ".join(f"{k}: {v}" for k, v in SWEEP_METRICS.items()))
    goal: str = Field(default="minimize", description="losses and times are minimised")


    @field_validator("goal")
    @classmethod
    def _minimise(cls, v: str) -> str:
        if v != "minimize":
            raise ValueError("goal must be 'minimize': the metrics are losses and times")
        return v


class SweepParameter(InputModel):
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


class SweepEarlyTerminate(InputModel):
    """Stop hopeless trials early; iterations are evaluations (``eval_every`` steps each)."""

    type: Annotated[str, one_of("early_terminate type", EARLY_TERMINATE)] = Field(description="hyperband (W&B's meaning: asynchronous successive halving, Optuna's "
                                  "SuccessiveHalvingPruner) or median (MedianPruner)")
    min_iter: int = Field(default=1, ge=1, le=10_000, description="evaluations every trial gets before it may be pruned")
    eta: int = Field(default=3, ge=2, le=10, description="hyperband's reduction factor")



class SweepCreate(InputModel):
    """POST /api/sweeps: a W&B sweep configuration (method, metric, parameters, early_terminate,
    run_cap) plus ``base`` (the run options every trial starts from), ``parallel`` and labels."""

    method: Annotated[str, one_of("method", SWEEP_METHODS)] = Field(description="grid, random or bayes (TPE)")
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
