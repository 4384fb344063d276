"""REST routes for other trainers' runs (TensorBoard files, speedrun logs read by ``tinygpt import``) and the
series every foreign run keeps by name; thin wrappers over app.services.foreign_runs."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response
from fastapi.responses import StreamingResponse

from ..deps import RunId, SessionDep, SettingsDep
from ..models import ForeignImport, RunPublic, SeriesPublic
from ..services import foreign_runs as svc
from ..services.runs import get_run

router = APIRouter(prefix="/api/runs", tags=["foreign runs"])


@router.post("/import-foreign", status_code=201, response_model=RunPublic)
def import_foreign(body: ForeignImport, session: SessionDep, settings: SettingsDep) -> RunPublic:
    """A finished run of another trainer, every value by its own name (``tinygpt import`` reads TensorBoard
    folders and nanoGPT, llm.c and modded-nanogpt logs); the names that mean a run column fill its metrics."""
    return RunPublic.of(svc.import_foreign(session, body=body, settings=settings))


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
