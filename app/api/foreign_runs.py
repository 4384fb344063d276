"""REST routes for other trainers' runs (TensorBoard files, speedrun logs read by ``tinygpt import``) and the
series every foreign run keeps by name; thin wrappers over app.services.foreign_runs."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Form, Query, Response, UploadFile
from fastapi.responses import StreamingResponse

from ..deps import RunId, SessionDep, SettingsDep
from ..models import ForeignImport, RunPublic, SeriesPublic
from ..services import foreign_runs as svc
from ..services.foreign_upload import import_files
from ..services.runs import get_run

router = APIRouter(prefix="/api/runs", tags=["foreign runs"])


@router.post("/import-foreign", status_code=201, response_model=RunPublic)
def import_foreign(body: ForeignImport, session: SessionDep, settings: SettingsDep) -> RunPublic:
    """A finished run of another trainer, every value by its own name (``tinygpt import`` reads TensorBoard
    folders and nanoGPT, llm.c and modded-nanogpt logs); the names that mean a run column fill its metrics."""
    return RunPublic.of(svc.import_foreign(session, body=body, settings=settings))


@router.post("/import-files", status_code=201, response_model=RunPublic)
async def import_uploaded_files(
    session: SessionDep, settings: SettingsDep, files: list[UploadFile],
    name: Annotated[str | None, Form(max_length=200, description="default: the folder's or file's name")] = None,
    config: Annotated[str | None, Form(max_length=100_000, description="its script's options, a JSON object")] = None,
    device: Annotated[str | None, Form(max_length=50, description="the device it trained on (cpu, cuda, ...)")] = None,
    tokens_per_step: Annotated[int | None, Form(ge=1, le=2**31 - 1, description="tokens a step trains on, where "
                                                "its logs do not count tokens")] = None,
    target_val_loss: Annotated[float | None, Form(gt=0, le=100)] = None,
) -> RunPublic:
    """The import page's upload: TensorBoard event files (one, or a log folder's) or one nanoGPT, llm.c or
    modded-nanogpt log, read as ``tinygpt import`` reads them (``TINYGPT_MAX_UPLOAD_MB`` in all)."""
    run = await import_files(session, files=[(f.filename or "upload", f) for f in files], settings=settings,
                             name=name, config=config, device=device, tokens_per_step=tokens_per_step,
                             target_val_loss=target_val_loss)
    return RunPublic.of(run)


@router.get("/{run_id}/series", response_model=list[SeriesPublic],
            responses={200: {"content": {"text/csv": {"schema": {"type": "string"}}}}})
def run_series(run_id: RunId, session: SessionDep, settings: SettingsDep,
               max_points: Annotated[int, Query(ge=2, le=svc.SERIES_POINTS_MAX,
                                                description="per name, thinned evenly past it (json)")] = 2000,
               format: Annotated[Literal["json", "csv"], Query(description="csv: every point, none thinned, as "
                                                               "name,step,value,wall_time")] = "json",
               ) -> list[SeriesPublic] | Response:
    """Every value the run's trainer logged, by its own name (a run of this dashboard's trainer has none): each
    name's column says which run column it fills (null: drawn as its own chart)."""
    get_run(session, run_id=run_id)
    if format == "csv":
        return StreamingResponse(svc.series_csv(settings, run_id=run_id), media_type="text/csv",
                                 headers={"Content-Disposition": f'attachment; filename="run-{run_id}-series.csv"'})
    return svc.run_series(session, run_id=run_id, max_points=max_points)
