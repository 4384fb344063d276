"""REST routes for runs trained elsewhere: reported live by ``tinygpt train --report-to`` or imported when
finished by ``tinygpt import``; thin wrappers over app.services.reports. Token-guarded like every write."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from ..db import session_scope
from ..deps import RunId, SessionDep, SettingsDep
from ..models import ReportAck, ReportBatch, ReportedRunCreate, RunImport, RunPublic
from ..services import reports as svc
from ..settings import Settings

router = APIRouter(prefix="/api/runs", tags=["reported runs"])


@router.post("/reported", status_code=201, response_model=RunPublic)
def create_reported_run(body: ReportedRunCreate, session: SessionDep, settings: SettingsDep,
                        response: Response) -> RunPublic:
    """A run trained on another machine that reports here as it trains (``tinygpt train --report-to``).
    Created running; no worker claims it. The same ``report_id`` again answers 200 with the same run."""
    known = svc.find_reported_run(session, report_id=body.report_id)
    if known is not None:
        response.status_code = 200
        return RunPublic.of(known)
    return RunPublic.of(svc.create_reported_run(session, body=body, settings=settings))


@router.post("/{run_id}/report", response_model=ReportAck)
def report(run_id: RunId, body: ReportBatch, session: SessionDep, settings: SettingsDep) -> ReportAck:
    """Items of the trainer's journal (start, metric rows, samples, log lines, alerts, the end), each
    applied once by its ``seq``; an empty batch is a heartbeat. The answer says how far the dashboard
    holds the journal and whether someone asked the run to stop."""
    return svc.apply_report(session, run_id=run_id, items=body.items, settings=settings)


@router.put("/{run_id}/checkpoint", response_model=ReportAck,
            openapi_extra={"requestBody": {"required": True, "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}})
async def upload_checkpoint(run_id: RunId, request: Request, settings: SettingsDep,
                            seq: Annotated[int | None, Query(ge=1, le=2**31 - 1, description="its journal item")] = None
                            ) -> ReportAck:
    """A reported or imported run's best checkpoint, streamed (at most ``TINYGPT_MAX_CHECKPOINT_MB``).
    It is kept only if it is a checkpoint this dashboard can load: read with ``weights_only`` (never
    unpickled beyond tensors and plain data) and its weights checked against its model config."""
    folder = await run_in_threadpool(upload_folder, run_id, settings)
    upload = folder / f".upload-{uuid.uuid4().hex}.tmp"
    try:
        with open(upload, "wb") as f:
            async for chunk in request.stream():
                f.write(chunk)
        return await run_in_threadpool(accept, run_id, upload, seq, settings)
    finally:
        upload.unlink(missing_ok=True)


def upload_folder(run_id: int, settings: Settings) -> Path:
    with session_scope(settings) as session:
        return svc.upload_folder(session, run_id=run_id)


def accept(run_id: int, upload: Path, seq: int | None, settings: Settings) -> ReportAck:
    with session_scope(settings) as session:
        return svc.accept_checkpoint(session, run_id=run_id, upload=upload, seq=seq, settings=settings)


@router.post("/import", status_code=201, response_model=RunPublic)
def import_run(body: RunImport, session: SessionDep, settings: SettingsDep) -> RunPublic:
    """A finished run trained elsewhere, with all its metrics rows (``tinygpt import`` reads them from a run
    folder or a CSV); its checkpoint follows with ``PUT /api/runs/{id}/checkpoint``."""
    return RunPublic.of(svc.import_run(session, body=body, settings=settings))
