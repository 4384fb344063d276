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
from .sweep_distributions import DISTRIBUTIONS, filled


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
    "induction_step": "the first evaluation step at which a head's induction score (recorded at every evaluation, "
                      "option head_scores) reached 0.5: how soon an induction head formed (a trial where none did "
                      "ranks after every one where one did, the higher its best head's last score first)",
}
EARLY_TERMINATE = ("hyperband", "median")
#: Keys of a W&B sweep configuration that have no meaning here, refused with what they are for in W&B.
WANDB_ONLY = {"program": "the script its agent runs", "command": "how its agent calls that script",
              "project": "the W&B project the runs go to", "entity": "the W&B team or user",
              "controller": "where W&B runs the sweep's controller"}


class SweepMetric(InputModel):
    name: Annotated[str, one_of("metric", SWEEP_METRICS)] = Field(
        default="val_loss", description=", ".join(f"{k}: {v}" for k, v in SWEEP_METRICS.items()))
    goal: str = Field(default="minimize", description="losses and times are minimised")
    target: float | None = Field(default=None, description="W&B's: once a finished trial's metric is at most this, "
                                 "the sweep adds no more trials and ends when its running ones do")

    @field_validator("goal")
    @classmethod
    def _minimise(cls, v: str) -> str:
        if v != "minimize":
            raise ValueError("goal must be 'minimize': the metrics are losses and times")
        return v


class SweepParameter(InputModel):
    """One option to vary, as in a W&B sweep: ``value``, ``values`` (with ``probabilities`` or not), or a
    ``distribution`` with its keys (``min``/``max``, ``mu``/``sigma``, ``a``/``b``, ``q``), each with its W&B
    meaning and defaults (:mod:`.sweep_distributions`). The stored parameter names its distribution and the
    defaults it used."""

    value: Any = None
    values: list[Any] | None = Field(default=None, min_length=1, max_length=100)
    probabilities: list[float] | None = Field(default=None, min_length=1, max_length=100)
    min: int | float | None = None  # ints stay ints (int_uniform's bounds)
    max: int | float | None = None
    distribution: str | None = Field(default=None, description=", ".join(DISTRIBUTIONS))
    q: int | float | None = Field(default=None, description="q_ distributions: a multiple of it (default 1)")
    mu: float | None = Field(default=None, description="normal family: the mean (default 0)")
    sigma: float | None = Field(default=None, description="normal family: the deviation (default 1)")
    a: float | None = Field(default=None, description="beta: the first shape (default 1)")
    b: float | None = Field(default=None, description="beta: the second shape (default 1)")

    @model_validator(mode="after")
    def _w_and_b_meaning(self) -> SweepParameter:
        for key, value in filled(self.model_dump()).items():
            setattr(self, key, value)
        return self


class SweepEarlyTerminate(InputModel):
    """Stop hopeless trials early; iterations are evaluations (``eval_every`` steps each). W&B's two forms:
    ``min_iter`` (bands at min_iter x eta^k), or ``max_iter`` with ``s`` (bands at max_iter / eta, / eta², ... s
    of them, each at least 1), whose lowest band is the min_iter stored.

    >>> SweepEarlyTerminate(type="hyperband", max_iter=27, s=2, eta=3).min_iter
    3
    """

    type: Annotated[str, one_of("early_terminate type", EARLY_TERMINATE)] = Field(description="hyperband (W&B's meaning: asynchronous successive halving, Optuna's "
                                  "SuccessiveHalvingPruner) or median (MedianPruner)")
    min_iter: int | None = Field(default=None, ge=1, le=10_000, description="evaluations every trial gets before it "
                                 "may be pruned (default 1, or derived from max_iter and s)")
    max_iter: int | None = Field(default=None, ge=1, le=100_000, description="W&B's other form: the highest band")
    s: int = Field(default=0, ge=0, le=20, description="with max_iter: how many bands below it (W&B's s)")
    eta: int = Field(default=3, ge=2, le=10, description="hyperband's reduction factor")

    @model_validator(mode="after")
    def _lowest_band(self) -> SweepEarlyTerminate:
        if self.max_iter is None:
            self.min_iter = self.min_iter or 1
            return self
        bands, band = [], float(self.max_iter)
        for _ in range(self.s):  # W&B's bands: max_iter / eta^k, k = 1..s, while at least 1
            band /= self.eta
            if band < 1:
                break
            bands.append(int(band))
        if not bands:
            raise ValueError(f"max_iter {self.max_iter} with s {self.s} and eta {self.eta} makes no band: give s of 1 "
                             "or more (W&B's default 0 makes none), a smaller eta, or min_iter")
        if self.min_iter is not None and self.min_iter != min(bands):  # a stored config holds both, the same
            raise ValueError(f"min_iter {self.min_iter} is not the lowest band of max_iter {self.max_iter} with s "
                             f"{self.s} and eta {self.eta} ({min(bands)}): give one form")
        self.min_iter = min(bands)
        return self



class SweepCreate(InputModel):
    """POST /api/sweeps: a W&B sweep configuration (method, metric, parameters, early_terminate,
    run_cap) plus ``base`` (the run options every trial starts from), ``parallel`` and labels."""

    @model_validator(mode="before")
    @classmethod
    def _no_wandb_only_keys(cls, data: Any) -> Any:
        given = [key for key in WANDB_ONLY if isinstance(data, dict) and key in data]
        if given:
            raise ValueError("; ".join(f"{key} is W&B's ({WANDB_ONLY[key]})" for key in given) + ": a sweep here "
                             "trains the run options of base and parameters; leave " +
                             ("it" if len(given) == 1 else "them") + " out")
        return data

    method: Annotated[str, one_of("method", SWEEP_METHODS)] = Field(description="grid, random or bayes (TPE)")
    metric: SweepMetric = Field(default_factory=SweepMetric)
    parameters: dict[str, SweepParameter] = Field(min_length=1, max_length=30)
    early_terminate: SweepEarlyTerminate | None = None
    run_cap: int | None = Field(default=None, ge=1, le=1000, description="trials at most (grid: default the whole grid)")
    base: dict[str, Any] = Field(default_factory=dict, description="run options every trial starts from (POST /api/runs)")
    parallel: int = Field(default=2, ge=1, le=64, description="trials queued or running at once")
    seeds: int = Field(default=1, ge=1, le=10, description="runs per trial, one a seed from base's seed on; the "
                       "trial's objective is their mean (pruning judges a trial by its first run to report each "
                       "evaluation)")
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
    notes: str = Field(default="", sa_column_kwargs={"server_default": ""})  # Markdown; a W&B description starts it


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
    notes: str


class SweepUpdate(InputModel):
    """PATCH /api/sweeps/{id}."""

    notes: str | None = Field(default=None, max_length=20_000)


class TrialPublic(SQLModel):
    """One run of a trial (a trial of a sweep over seeds has one a seed, each showing the trial's objective)."""

    run_id: int
    trial: int
    seed: int
    name: str
    status: str
    params: dict[str, Any]
    last_step: int
    steps: int
    best_val_loss: float | None
    objective: float | None  # the trial's: the mean over its seeds once every one succeeded
    tokens_per_sec: float | None
    has_checkpoint: bool
    disk_bytes: int


class SweepDetail(SweepPublic):
    trials: list[TrialPublic]
    best: TrialPublic | None
    importance: dict[str, float] | None  # once enough trials have finished
