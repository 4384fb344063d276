"""MLflow's tracking protocol, the part its official client speaks (``mlflow-skinny`` 2.x and 3.x): the request
bodies as the client sends them (int64 fields may come as strings: protobuf's JSON), bounded as MLflow bounds
them. The answers are plain dicts shaped as MLflow's (app/services/mlflow_tracking.py)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from .common import InputModel
from .metrics import SERIES_NAME_MAX
from .reports import MAX_INT62, PARAM_VALUE_MAX

#: MLflow's own bounds: a tag's value, and one log-batch's metrics, params and tags.
TAG_VALUE_MAX = 8000
BATCH_METRICS_MAX, BATCH_PARAMS_MAX, BATCH_TAGS_MAX = 1000, 100, 100
MAX_RESULTS = 1000  # a page of search results at most (what a client asks beyond is paged: next_page_token)
ASKED_RESULTS_MAX = 100_000  # MLflow's clients ask up to this many by default
RunIdText = Annotated[str, Field(min_length=1, max_length=64)]
Key = Annotated[str, Field(min_length=1, max_length=SERIES_NAME_MAX)]
Millis = Annotated[int, Field(ge=0, le=MAX_INT62)]


class MlflowIn(InputModel):
    """A request body of MLflow's protocol: the fields its clients send, nothing else."""


class KeyValue(MlflowIn):
    key: Key
    value: Annotated[str, Field(max_length=TAG_VALUE_MAX)]


class ParamIn(MlflowIn):
    key: Key
    value: Annotated[str, Field(max_length=PARAM_VALUE_MAX)]


class MetricValueIn(MlflowIn):
    key: Key
    value: float  # MLflow takes NaN and infinities: kept as a series only (never a run column)
    timestamp: Millis
    step: Annotated[int, Field(ge=0, le=MAX_INT62)] = 0
    # what 3.x clients add to a metric (a logged model, a dataset): accepted, not kept
    model_id: str | None = Field(default=None, max_length=200)
    dataset_name: str | None = Field(default=None, max_length=500)
    dataset_digest: str | None = Field(default=None, max_length=500)


class CreateExperiment(MlflowIn):
    name: Annotated[str, Field(min_length=1, max_length=200)]
    artifact_location: str | None = Field(default=None, max_length=1000)
    tags: list[KeyValue] = Field(default_factory=list, max_length=BATCH_TAGS_MAX)


class SearchExperiments(MlflowIn):
    max_results: int = Field(default=1000, ge=1, le=MAX_RESULTS)
    filter: str | None = Field(default=None, max_length=1000)
    order_by: list[str] = Field(default_factory=list, max_length=10)
    page_token: str | None = Field(default=None, max_length=100)
    view_type: str | None = Field(default=None, max_length=20)


class CreateRun(MlflowIn):
    experiment_id: str = Field(default="0", max_length=50)
    user_id: str | None = Field(default=None, max_length=200)
    run_name: str | None = Field(default=None, max_length=200)
    start_time: Millis | None = None
    tags: list[KeyValue] = Field(default_factory=list, max_length=BATCH_TAGS_MAX)


class RunRef(MlflowIn):
    run_id: RunIdText | None = None
    run_uuid: RunIdText | None = None  # the older name of run_id, sent beside it

    def ref(self) -> str:
        return self.run_id or self.run_uuid or ""


class UpdateRun(RunRef):
    status: str | None = Field(default=None, max_length=20)
    end_time: Millis | None = None
    run_name: str | None = Field(default=None, max_length=200)


class LogMetric(RunRef, MetricValueIn):
    pass


class LogParam(RunRef, ParamIn):
    pass


class SetTag(RunRef, KeyValue):
    pass


class LogBatch(RunRef):
    metrics: list[MetricValueIn] = Field(default_factory=list, max_length=BATCH_METRICS_MAX)
    params: list[ParamIn] = Field(default_factory=list, max_length=BATCH_PARAMS_MAX)
    tags: list[KeyValue] = Field(default_factory=list, max_length=BATCH_TAGS_MAX)


class SearchRuns(MlflowIn):
    experiment_ids: list[str] = Field(default_factory=list, max_length=100)
    filter: str | None = Field(default=None, max_length=1000)
    run_view_type: str | None = Field(default=None, max_length=20)
    max_results: int = Field(default=1000, ge=1, le=ASKED_RESULTS_MAX)
    order_by: list[str] = Field(default_factory=list, max_length=10)
    page_token: str | None = Field(default=None, max_length=100)
