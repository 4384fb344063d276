"""REST routes for runs: thin wrappers over app.services.runs.

Reads are ``async def``: short indexed queries that SQLite answers without waiting (WAL: readers
never wait for the worker's writes), run on the event loop; a thread-pool hop cost more app CPU
than the query (0.8 ms a request, measured by benchmarks/bench_load.py). Writes stay ``def``, in
the thread pool: they may wait for SQLite's write lock, which must not stall the event loop.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query, Response
from fastapi.responses import FileResponse, StreamingResponse
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from ..db import session_scope
from ..deps import ModelsDep, RunId, SessionDep, SettingsDep
from ..errors import Invalid
from ..models import (
    MAX_INT64,
    MetricColumns,
    MetricPublic,
    RepeatRequest,
    RunCreate,
    RunPublic,
    RunSort,
    RunsPage,
    RunStatus,
    RunUpdate,
    SamplePublic,
)
from ..models.exports import ExportQuery
from ..services import lifecycle, model_export
from ..services import runs as svc
from ..services.metric_history import (
    history_head,
    metric_columns,
    stream_columns,
    stream_rows_csv,
    stream_rows_json,
)
from ..services.sampling import SampleRequest, neighbours, stream_sample
from ..settings import Settings

router = APIRouter(prefix="/api/runs", tags=["runs"])
MAX_STEP = 2**31 - 1  # steps are 32-bit integers in the database


@router.post("", status_code=201, response_model=list[RunPublic])
def create_runs(body: RunCreate, session: SessionDep, settings: SettingsDep) -> list[RunPublic]:
    """Create one run, or one per device (same seed, one group) when ``device`` is a list."""
    return svc.public_runs(session, lifecycle.create_runs(session, body=body, settings=settings))


@router.post("/{run_id}/repeat", status_code=201, response_model=list[RunPublic])
def repeat_run(run_id: RunId, body: RepeatRequest, session: SessionDep, settings: SettingsDep) -> list[RunPublic]:
    """The run's options again over the next seeds its group has not used, in its group: "Run 2 more seeds"."""
    return svc.public_runs(session, lifecycle.repeat_run(session, run_id=run_id, count=body.seeds,
                                                          settings=settings))


@router.get("", response_model=RunsPage)
async def list_runs(
    session: SessionDep,
    status: RunStatus | None = None,
    device: Annotated[str | None, Query(max_length=50)] = None,
    tag: Annotated[str | None, Query(max_length=50)] = None,
    group: Annotated[str | None, Query(max_length=50)] = None,
    worker: Annotated[str | None, Query(max_length=200, description="a worker's name or host")] = None,
    stalled: Annotated[bool, Query(description="only runs that are stalled (running, no step for too long)")] = False,
    sort: Annotated[RunSort, Query(description="newest first, or the lowest best_val_loss or the shortest "
                                   "time_to_target (training seconds) first, runs without one last")] = RunSort.newest,
    offset: Annotated[int, Query(ge=0, le=MAX_INT64)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> RunsPage:
    return svc.list_runs(session, status=status, device=device, tag=tag, group=group, worker=worker, stalled=stalled,
                         sort=sort, offset=offset, limit=limit)


@router.get("/{run_id}", response_model=RunPublic)
async def get_run(run_id: RunId, session: SessionDep) -> RunPublic:
    return svc.public_run(session, svc.get_run(session, run_id=run_id))


@router.patch("/{run_id}", response_model=RunPublic)
def update_run(run_id: RunId, body: RunUpdate, session: SessionDep) -> RunPublic:
    return svc.public_run(session, svc.update_run(session, run_id=run_id, body=body))


@router.delete("/{run_id}", status_code=204)
def delete_run(run_id: RunId, session: SessionDep, settings: SettingsDep) -> Response:
    """The run, its metrics, samples and events, and its files (checkpoints): the disk is freed."""
    svc.delete_run(session, run_id=run_id, settings=settings)
    return Response(status_code=204)


@router.post("/{run_id}/cancel", response_model=RunPublic)
def cancel_run(run_id: RunId, session: SessionDep, settings: SettingsDep) -> RunPublic:
    return svc.public_run(session, lifecycle.cancel_run(session, run_id=run_id, settings=settings))


@router.get("/{run_id}/metrics", response_model=list[MetricPublic] | MetricColumns,
            responses={200: {"content": {"text/csv": {"schema": {"type": "string"}}}}})
async def get_metrics(  # noqa: ANN201
    run_id: RunId, session: SessionDep, settings: SettingsDep,
    format: Annotated[str, Query(pattern="^(json|csv|columns)$", description="json: a list of rows; csv; columns: "
                                 "one list per field (compact), with the run's last event id")] = "json",
    from_step: Annotated[int | None, Query(ge=0, le=MAX_STEP, description="rows from this step on")] = None,
    to_step: Annotated[int | None, Query(ge=0, le=MAX_STEP, description="rows up to this step")] = None,
    max_points: Annotated[int | None, Query(ge=10, le=100_000, description="columns only: at most about this many "
                                            "rows, thinned per step range (lowest and highest train loss of each; "
                                            "every evaluation kept); absent: every row (streamed past 5,000)")] = None,
):
    """A run's metrics rows, ordered by step. Charts read ``format=columns&max_points=N`` (``GET
    /api/runs/{id}/events`` after its ``last_event_id`` for what comes next); zooming in reads a step range.
    Every format but a thinned one reads the whole range: up to a page (5,000 rows) answered at once, a longer
    one streamed a page at a time, whatever the run's length."""
    if format == "columns" and max_points is not None:
        return metric_columns(session, run_id=run_id, from_step=from_step, to_step=to_step, max_points=max_points)
    head = history_head(session, run_id=run_id, from_step=from_step, to_step=to_step,
                        summary=format == "columns")  # 404 before any byte
    stream, media_type, headers = {
        "csv": (stream_rows_csv, "text/csv", {"Content-Disposition": f'attachment; filename="run-{run_id}-metrics.csv"'}),
        "columns": (stream_columns, "application/json", None),
        "json": (stream_rows_json, "application/json", None)}[format]
    if head["complete"]:  # one page: answered at once (no thread hand-offs per chunk)
        return Response("".join(stream(settings, head)), media_type=media_type, headers=headers)
    return StreamingResponse(stream(settings, head), media_type=media_type, headers=headers)


@router.get("/{run_id}/samples", response_model=list[SamplePublic])
async def get_samples(run_id: RunId, session: SessionDep) -> list[SamplePublic]:
    return svc.run_samples(session, run_id=run_id)


@router.get("/{run_id}/checkpoint")
def download_checkpoint(run_id: RunId, session: SessionDep, settings: SettingsDep) -> FileResponse:
    path = svc.checkpoint_file(session, run_id=run_id, settings=settings)
    return FileResponse(path, filename=f"run-{run_id}-best{path.suffix}", media_type="application/octet-stream")


@router.get("/{run_id}/export")
def download_export(run_id: RunId, query: Annotated[ExportQuery, Query()], settings: SettingsDep) -> FileResponse:
    """The best checkpoint for other tools: a zip of a transformers folder (``hf``), a GGUF file for llama.cpp
    (``gguf``) or plain ``safetensors``; token-guarded like the checkpoint. 422 naming ``format`` for an
    architecture no stock class holds."""
    path = model_export.exported_file(run_id=run_id, checkpoint=best_checkpoint(run_id, settings), query=query)
    return FileResponse(path, filename=query.file_name(run_id), media_type="application/octet-stream")


def best_checkpoint(run_id: int, settings: Settings) -> Path:
    """A short-lived session: streaming routes must not hold a database connection while they stream."""
    with session_scope(settings) as session:
        return svc.checkpoint_file(session, run_id=run_id, settings=settings)


@router.post("/{run_id}/sample")
async def sample(run_id: RunId, body: SampleRequest, settings: SettingsDep, models: ModelsDep) -> EventSourceResponse:
    """Stream generated text as ``token`` events ({"text": piece}), then one ``end`` event with the whole text."""
    if body.max_tokens > settings.sample_max_tokens:
        raise Invalid(f"max_tokens must be at most {settings.sample_max_tokens}", field="max_tokens")
    path = await run_in_threadpool(best_checkpoint, run_id, settings)
    model, tokenizer = await run_in_threadpool(models.get, path)  # 429 or 422 before the stream starts

    async def events():  # noqa: ANN202
        pieces = []
        try:
            async for piece in stream_sample(model, tokenizer, body):
                pieces.append(piece)
                yield {"event": "token", "data": json.dumps({"text": piece})}
        except Exception as exc:
            yield {"event": "error", "data": json.dumps({"message": f"{type(exc).__name__}: {exc}"})}
            return
        yield {"event": "end", "data": json.dumps({"prompt": body.prompt, "text": "".join(pieces)})}

    return EventSourceResponse(events())


@router.get("/{run_id}/neighbors")
async def get_neighbours(
    run_id: RunId, settings: SettingsDep, models: ModelsDep,
    word: Annotated[str, Query(min_length=1, max_length=100)],
    k: Annotated[int, Query(ge=1, le=100)] = 10,
) -> list[dict]:
    path = await run_in_threadpool(best_checkpoint, run_id, settings)
    model, tokenizer = await run_in_threadpool(models.get, path)
    return await run_in_threadpool(neighbours, model, tokenizer, word, k)
