"""Notes on runs and sweeps, edited on their pages: the editor posts as one stops typing (htmx) and gets the
notes back rendered (Markdown, safely: app.templating.markdown_html). The API sets them with PATCH."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from ..deps import RunId, SessionDep, SweepId
from ..errors import Invalid
from ..models import RunUpdate, SweepUpdate
from ..services import runs as run_svc
from ..services import sweeps as sweep_svc
from ..templating import render

router = APIRouter(include_in_schema=False)


async def posted(request: Request, model: type[RunUpdate] | type[SweepUpdate]) -> RunUpdate | SweepUpdate:
    """The notes the editor posted, checked as the API checks them (422 naming ``notes``)."""
    try:
        return model(notes=str((await request.form()).get("notes", "")))
    except ValidationError as exc:
        raise Invalid(exc.errors()[0]["msg"], field="notes") from None


@router.post("/partials/runs/{run_id}/notes", response_class=HTMLResponse)
async def save_run_notes(run_id: RunId, request: Request, session: SessionDep) -> HTMLResponse:
    update = await posted(request, RunUpdate)
    run = await run_in_threadpool(lambda: run_svc.update_run(session, run_id=run_id, body=update))
    return render(request, "_notes.html", notes=run.notes, saved=True)


@router.post("/partials/sweeps/{sweep_id}/notes", response_class=HTMLResponse)
async def save_sweep_notes(sweep_id: SweepId, request: Request, session: SessionDep) -> HTMLResponse:
    update = await posted(request, SweepUpdate)
    sweep = await run_in_threadpool(lambda: sweep_svc.update_sweep(session, sweep_id=sweep_id, body=update))
    return render(request, "_notes.html", notes=sweep.notes, saved=True)
