"""What the W&B-style drop-in (``tinygpt/wandb_dropin/wandb``) sends: a run's start (``wandb.init``), its logged
rows (``wandb.log``, with ``wandb.config`` and ``wandb.summary`` changes), its end (``wandb.finish``). Bounded as
MLflow's calls are (app/models/mlflow.py): the same script sends the same amounts either way."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator

from .common import InputModel
from .metrics import SERIES_NAME_MAX
from .mlflow import BATCH_METRICS_MAX
from .reports import MAX_INT32, MAX_PARAMS, PARAM_VALUE_MAX

Key = Annotated[str, Field(min_length=1, max_length=SERIES_NAME_MAX)]
#: A config or summary value: W&B takes any JSON; the drop-in flattens nested dicts into dotted keys.
Scalar = Annotated[str, Field(max_length=PARAM_VALUE_MAX)] | float | int | bool | None
ROWS_MAX = 1000  # rows in one log call: the drop-in sends what gathered since its last call, in pages


class WandbRunCreate(InputModel):
    """POST /api/wandb/runs: ``wandb.init``. The same ``client_id`` twice is the same run (a retry whose answer
    was lost, or ``wandb.init(id=..., resume=...)``)."""

    client_id: str = Field(description="the drop-in's id for the run (8-64 lowercase hex digits or W&B's own id)")
    project: str = Field(default="uncategorized", min_length=1, max_length=200, description="its group here")
    name: str | None = Field(default=None, max_length=200)
    tags: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(default_factory=list, max_length=50)
    notes: str | None = Field(default=None, max_length=10_000)
    host: str | None = Field(default=None, max_length=200, description="the machine the script runs on")
    program: str | None = Field(default=None, max_length=500, description="the script (sys.argv[0])")
    start_time: float = Field(ge=0, le=4e9, description="when wandb.init was called, in Unix seconds")
    config: dict[Key, Scalar] = Field(default_factory=dict, max_length=MAX_PARAMS)

    @field_validator("client_id")
    @classmethod
    def _run_id(cls, v: str) -> str:
        if not re.fullmatch(r"[0-9A-Za-z_-]{8,64}", v):
            raise ValueError("client_id must be 8-64 letters, digits, '-' or '_'")
        return v


class WandbRow(InputModel):
    """One ``wandb.log`` commit: its values at its step (W&B's ``_step``, or ``step=``)."""

    step: int = Field(ge=0, le=MAX_INT32)
    time: float = Field(ge=0, le=4e9, description="when it was logged, in Unix seconds")
    values: dict[Key, float] = Field(max_length=BATCH_METRICS_MAX, description="numbers only: NaN is kept as a "
                                     "series point, never a run column")


class WandbLog(InputModel):
    """POST /api/wandb/runs/{id}/log: the rows, config and summary changes since the last call (none: a
    heartbeat, whose answer says whether the run was asked to stop)."""

    rows: list[WandbRow] = Field(default_factory=list, max_length=ROWS_MAX)
    config: dict[Key, Scalar] = Field(default_factory=dict, max_length=MAX_PARAMS)
    summary: dict[Key, Scalar] = Field(default_factory=dict, max_length=MAX_PARAMS)


class WandbFinish(InputModel):
    """POST /api/wandb/runs/{id}/finish: ``wandb.finish(exit_code=)`` (or the script's exit)."""

    exit_code: int = Field(default=0, ge=-1000, le=1000)
    end_time: float = Field(ge=0, le=4e9)


class WandbAck(InputModel):
    id: int
    url: str
    cancel_requested: bool
