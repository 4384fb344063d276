"""Presets, devices, datasets, comparisons and the health check (reads ``async def``: see app.api.runs)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Query, UploadFile
from sqlalchemy import text

from tinygpt.presets import list_presets

from ..deps import SessionDep, SettingsDep
from ..errors import Invalid
from ..models import DatasetPublic
from ..services import datasets as ds_svc
from ..services.runs import compare_runs, machine_devices

router = APIRouter(prefix="/api", tags=["catalog"])
health_router = APIRouter(tags=["health"])


@router.get("/presets")
async def presets() -> list[dict]:
    """Every preset with its sizes and parameter count per architecture."""
    return list_presets()


@router.get("/devices")
def devices() -> list[dict]:
    """What this machine's workers can run; unavailable devices say why."""
    return list(machine_devices())


@router.get("/datasets")
async def datasets(session: SessionDep, settings: SettingsDep) -> list[dict]:
    return ds_svc.list_datasets(session, settings=settings)


@router.post("/datasets", status_code=201, response_model=DatasetPublic)
async def upload_dataset(
    session: SessionDep, settings: SettingsDep, file: UploadFile, name: Annotated[str, Form()]
) -> DatasetPublic:
    """Upload a UTF-8 text file (limit: ``TINYGPT_MAX_UPLOAD_MB``, enforced while the body streams in)."""
    ds = await ds_svc.upload_dataset(session, name=name, source=file, settings=settings)
    return DatasetPublic.model_validate(ds.model_dump())


@router.get("/compare")
def compare(session: SessionDep, ids: Annotated[str, Query(max_length=500, description="comma-separated run ids")]) -> dict:
    try:
        run_ids = [int(x) for x in ids.split(",") if x.strip()]
    except ValueError:
        raise Invalid("ids must be comma-separated integers", field="ids") from None
    return compare_runs(session, ids=run_ids)


@health_router.get("/healthz")
async def healthz(session: SessionDep) -> dict:
    session.exec(text("SELECT 1"))
    return {"status": "ok"}
