"""Presets, devices, datasets, comparisons and the health check (reads ``async def``: see app.api.runs)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Query, UploadFile
from sqlalchemy import text

from tinygpt import __version__
from tinygpt.options import Option
from tinygpt.presets import list_presets, model_size
from tinygpt.recipes import list_recipes
from tinygpt.run_config import OPTIONS, TrainConfig

from ..deps import SessionDep, SettingsDep
from ..errors import Invalid
from ..models import MODEL_SHAPERS, DatasetPublic, ModelSizeQuery
from ..services import datasets as ds_svc
from ..services.compare import compare_runs
from ..services.devices import machine_devices

router = APIRouter(prefix="/api", tags=["catalog"])
health_router = APIRouter(tags=["health"])


@router.get("/presets")
async def presets() -> list[dict]:
    """Every preset with its sizes and parameter count per architecture."""
    return list_presets()


@router.get("/recipes")
async def recipes() -> list[dict]:
    """Every recipe: a named set of run options (``recipe`` in POST /api/runs fills the options not given)."""
    return list_recipes()


@router.get("/options")
async def options() -> list[dict]:
    """Every run option, as declared once in the library: name, type, default, bounds or choices, unit,
    help, group, advanced. A run (POST /api/runs) sets them; a sweep (POST /api/sweeps) searches them."""
    return [option_info(o) for o in OPTIONS.values()]


def option_info(o: Option) -> dict:
    """An option as data; ``model``: it shapes the model (the preset's architecture or a size), so the new-run
    form asks ``/api/model-size`` again when it changes."""
    info = {k: v for k, v in vars(o).items() if k != "kind"}
    return {**info, "type": o.kind.__name__, "choices": list(o.choices) if o.choices else None,
            "model": o.name in MODEL_SHAPERS}


@router.get("/model-size")
async def model_size_of(query: Annotated[ModelSizeQuery, Query()]) -> dict:
    """Parameters and a rough training memory (MiB, fp32) of a preset with the model options given
    overriding it: what the new-run form shows before a run starts. 422 names an option out of range, an
    unknown one, or sizes that do not fit together."""
    sizes = query.model_dump(exclude={"batch_size"})
    try:
        config = TrainConfig(**sizes).model_config()
    except ValueError as exc:
        raise Invalid(str(exc), field="d_model") from None
    return model_size(config, query.batch_size)


@router.get("/devices")
def devices() -> list[dict]:
    """What this machine's workers can run; unavailable devices say why."""
    return list(machine_devices())


@router.get("/datasets")
async def datasets(session: SessionDep, settings: SettingsDep) -> list[dict]:
    return ds_svc.list_datasets(session, settings=settings)


@router.post("/datasets", status_code=201, response_model=DatasetPublic)
async def upload_dataset(
    session: SessionDep, settings: SettingsDep, file: UploadFile, name: Annotated[str, Form()],
    target_val_loss: Annotated[float | None, Form(description="its runs' default target validation loss (time to "
                                                  "target); unset: a known corpus' or none")] = None,
) -> DatasetPublic:
    """Upload a UTF-8 text file (limit: ``TINYGPT_MAX_UPLOAD_MB``, enforced while the body streams in)."""
    ds = await ds_svc.upload_dataset(session, name=name, source=file, settings=settings,
                                     target_val_loss=target_val_loss)
    return DatasetPublic.model_validate({**ds.model_dump(), "target_val_loss": ds_svc.own_target(ds)})


@router.get("/compare")
def compare(session: SessionDep, ids: Annotated[str, Query(max_length=500, description="comma-separated run ids")],
            group_by: Annotated[str | None, Query(max_length=100, description="a run option (or device): the runs "
                                                  "grouped by its value, each figure's mean, standard deviation and n, "
                                                  "and for two groups their difference with a 95% interval")] = None
            ) -> dict:
    try:
        run_ids = [int(x) for x in ids.split(",") if x.strip()]
    except ValueError:
        raise Invalid("ids must be comma-separated integers", field="ids") from None
    return compare_runs(session, ids=run_ids, group_by=group_by or None)


@health_router.get("/healthz")
async def healthz(session: SessionDep) -> dict:
    session.exec(text("SELECT 1"))
    return {"status": "ok", "version": __version__}
