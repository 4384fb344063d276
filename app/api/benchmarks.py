"""REST routes for hardware benchmarks: thin wrappers over app.services.benchmarks.

A benchmark is a run of kind ``benchmark``: it is queued, claimed by a worker, cancelled,
deleted and streamed (``/api/runs/{id}/events``) like a training run.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ..deps import RunId, SessionDep, SettingsDep
from ..models import BenchmarkCreate, BenchmarkPublic
from ..services import benchmarks as svc

router = APIRouter(prefix="/api/benchmarks", tags=["benchmarks"])


@router.post("", status_code=201, response_model=BenchmarkPublic)
def create_benchmark(body: BenchmarkCreate, session: SessionDep, settings: SettingsDep) -> BenchmarkPublic:
    """Queue a sweep over batch sizes x precisions (x CPU thread counts) on one device."""
    run = svc.create_benchmark(session, body=body, settings=settings)
    return svc.benchmark_public(session, run)


@router.get("", response_model=list[BenchmarkPublic])
def list_benchmarks(session: SessionDep, limit: Annotated[int, Query(ge=1, le=500)] = 100) -> list[BenchmarkPublic]:
    return svc.list_benchmarks(session, limit=limit)


@router.get("/estimates")
def speed_estimates(session: SessionDep) -> list[dict]:
    """Measured tokens/s per preset, device, precision and batch size (the new-run form's time estimate)."""
    return svc.speed_estimates(session)


@router.get("/{run_id}", response_model=BenchmarkPublic)
def get_benchmark(run_id: RunId, session: SessionDep) -> BenchmarkPublic:
    return svc.get_benchmark(session, run_id=run_id)
