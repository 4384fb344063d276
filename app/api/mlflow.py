"""MLflow's tracking API under ``/api/2.0/mlflow/``, the part its official client uses, so that an unmodified
script with ``MLFLOW_TRACKING_URI=http://dashboard:8000`` (and ``MLFLOW_TRACKING_TOKEN``: the dashboard's token)
reports here; thin routes over app.services.mlflow_tracking. Bodies and errors are MLflow's: a bad body is its
400 ``INVALID_PARAMETER_VALUE``, an endpoint not served here its 404 ``ENDPOINT_NOT_FOUND`` (the client carries
on where it can). Token-guarded like every other route."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, JSONResponse
from pydantic import BaseModel, ValidationError

from ..db import session_scope
from ..deps import SessionDep, SettingsDep
from ..models.mlflow import (
    CreateExperiment,
    CreateRun,
    LogBatch,
    LogMetric,
    LogParam,
    SearchExperiments,
    SearchRuns,
    SetTag,
    UpdateRun,
)
from ..services import mlflow_artifacts
from ..services import mlflow_tracking as svc
from ..services.mlflow_tracking import MlflowError
from ..settings import Settings

router = APIRouter(prefix="/api/2.0/mlflow", tags=["MLflow tracking"])
artifacts = APIRouter(prefix="/api/2.0/mlflow-artifacts", tags=["MLflow tracking"])
unserved = APIRouter(tags=["MLflow tracking"])
Body = TypeVar("Body", bound=BaseModel)


def error_response(request: Request, exc: MlflowError) -> JSONResponse:
    return JSONResponse({"error_code": exc.error_code, "message": exc.message}, status_code=exc.status_code)


async def body_of(request: Request, model: type[Body]) -> Body:
    """The request's JSON as ``model``; anything else is MLflow's INVALID_PARAMETER_VALUE, naming the field."""
    try:
        return model.model_validate_json(await request.body() or b"{}")
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise svc.invalid(f"Invalid value for '{where}': {first['msg']}") from None


@router.get("/experiments/get-by-name")
def get_experiment_by_name(session: SessionDep,
                           experiment_name: Annotated[str, Query(min_length=1, max_length=200)]) -> dict:
    group = svc.experiment_by_name(session, name=experiment_name)
    session.commit()
    return {"experiment": svc.experiment_public(group)}


@router.get("/experiments/get")
def get_experiment(session: SessionDep, experiment_id: Annotated[str, Query(min_length=1, max_length=50)]) -> dict:
    group = svc.experiment(session, experiment_id=experiment_id)
    session.commit()
    return {"experiment": svc.experiment_public(group)}


@router.post("/experiments/create")
async def create_experiment(request: Request, session: SessionDep) -> dict:
    body = await body_of(request, CreateExperiment)
    return {"experiment_id": svc.create_experiment(session, body=body)}


@router.post("/experiments/search")
async def search_experiments(request: Request, session: SessionDep) -> dict:
    body = await body_of(request, SearchExperiments)
    return {"experiments": svc.search_experiments(session, body=body)}


@router.post("/runs/create")
async def create_run(request: Request, session: SessionDep, settings: SettingsDep) -> dict:
    body = await body_of(request, CreateRun)
    return {"run": svc.run_public(session, svc.create_run(session, body=body, settings=settings))}


@router.get("/runs/get")
def get_run(session: SessionDep, run_id: Annotated[str | None, Query(max_length=64)] = None,
            run_uuid: Annotated[str | None, Query(max_length=64)] = None) -> dict:
    return {"run": svc.run_public(session, svc.tracked_run(session, run_id=run_id or run_uuid or ""))}


@router.post("/runs/update")
async def update_run(request: Request, session: SessionDep, settings: SettingsDep) -> dict:
    body = await body_of(request, UpdateRun)
    run = svc.update_run(session, body=body, settings=settings)
    return {"run_info": svc.run_public(session, run)["info"]}


@router.post("/runs/search")
async def search_runs(request: Request, session: SessionDep) -> dict:
    runs, token = svc.search_runs(session, body=await body_of(request, SearchRuns))
    return {"runs": runs, **({"next_page_token": token} if token else {})}


@router.post("/runs/log-batch")
async def log_batch(request: Request, session: SessionDep, settings: SettingsDep) -> dict:
    svc.log_batch(session, body=await body_of(request, LogBatch), settings=settings)
    return {}


@router.post("/runs/log-metric")
async def log_metric(request: Request, session: SessionDep, settings: SettingsDep) -> dict:
    m = await body_of(request, LogMetric)
    svc.log_batch(session, body=LogBatch(run_id=m.ref(), metrics=[m.model_dump(exclude={"run_id", "run_uuid"})]),
                  settings=settings)
    return {}


@router.post("/runs/log-parameter")
async def log_parameter(request: Request, session: SessionDep, settings: SettingsDep) -> dict:
    p = await body_of(request, LogParam)
    svc.log_batch(session, body=LogBatch(run_id=p.ref(), params=[{"key": p.key, "value": p.value}]), settings=settings)
    return {}


@router.post("/runs/set-tag")
async def set_tag(request: Request, session: SessionDep, settings: SettingsDep) -> dict:
    t = await body_of(request, SetTag)
    svc.log_batch(session, body=LogBatch(run_id=t.ref(), tags=[{"key": t.key, "value": t.value}]), settings=settings)
    return {}


@router.get("/metrics/get-history")
def get_metric_history(session: SessionDep, metric_key: Annotated[str, Query(min_length=1, max_length=250)],
                       run_id: Annotated[str | None, Query(max_length=64)] = None,
                       run_uuid: Annotated[str | None, Query(max_length=64)] = None,
                       page_token: Annotated[str | None, Query(max_length=100)] = None,
                       max_results: Annotated[int, Query(ge=1, le=25_000)] = 25_000) -> dict:
    metrics, token = svc.metric_history(session, run_id=run_id or run_uuid or "", key=metric_key,
                                        page_token=page_token, max_results=max_results)
    return {"metrics": metrics, **({"next_page_token": token} if token else {})}


@router.post("/logged-models/search")
def search_logged_models() -> dict:
    """No logged models are kept here (a run's model files are its artifacts): MLflow 3's client asks while it
    lists a run's artifacts, and an empty answer lets it list them."""
    return {"models": []}


@artifacts.get("/artifacts")
def list_artifacts(session: SessionDep, path: Annotated[str, Query(min_length=1, max_length=2000)]) -> dict:
    """The files directly in ``path`` (``<experiment>/<run>/artifacts[/<folder>]``), names relative to it."""
    return {"files": mlflow_artifacts.list_artifacts(session, path=path)}


@artifacts.get("/artifacts/{path:path}")
def download_artifact(path: str, session: SessionDep) -> FileResponse:
    return FileResponse(mlflow_artifacts.download_file(session, path=path), media_type="application/octet-stream")


@artifacts.put("/artifacts/{path:path}", openapi_extra={"requestBody": {"required": True, "content": {
    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}})
async def upload_artifact(path: str, request: Request, settings: SettingsDep) -> dict:
    """One file, streamed into the run's artifacts folder (at most ``TINYGPT_MAX_CHECKPOINT_MB``, the run's
    artifacts at most ``TINYGPT_MAX_ARTIFACTS_MB``); a checkpoint of ours becomes the run's checkpoint."""
    target = await run_in_threadpool(upload_target, path, settings)
    upload = target.with_name(f".upload-{uuid.uuid4().hex}.tmp")
    try:
        with open(upload, "wb") as f:
            async for chunk in request.stream():
                f.write(chunk)
        await run_in_threadpool(keep_upload, path, upload, settings)
    finally:
        upload.unlink(missing_ok=True)
    return {}


def upload_target(path: str, settings: Settings) -> Path:
    """A short-lived session: an upload must not hold a database connection while it streams."""
    with session_scope(settings) as session:
        return mlflow_artifacts.upload_target(session, path=path, settings=settings)


def keep_upload(path: str, upload: Path, settings: Settings) -> None:
    with session_scope(settings) as session:
        mlflow_artifacts.keep_upload(session, path=path, upload=upload, settings=settings)


@unserved.api_route("/api/2.0/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
                    include_in_schema=False)
@unserved.api_route("/api/3.0/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
                    include_in_schema=False)
def not_served(rest: str, request: Request) -> Any:
    """What MLflow's client may probe that is not served here (logged models, traces, server info, ...)."""
    raise MlflowError("ENDPOINT_NOT_FOUND", f"{request.method} {request.url.path} is not served by this "
                      "dashboard's MLflow tracking API", status_code=404)


__all__ = ["MlflowError", "artifacts", "error_response", "router", "unserved"]
