"""REST routes for sweeps: thin wrappers over app.services.sweeps (the stream is in app/api/events.py)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from ..deps import SessionDep, SettingsDep, SweepId
from ..models import SweepCreate, SweepDetail, SweepPublic, SweepUpdate
from ..services import sweeps as svc

router = APIRouter(prefix="/api/sweeps", tags=["sweeps"])


@router.post("", status_code=201, response_model=SweepDetail)
def create_sweep(body: SweepCreate, session: SessionDep, settings: SettingsDep) -> SweepDetail:
    """Start a sweep (a W&B sweep configuration plus ``base``, ``parallel``, labels): its first trials are queued."""
    sweep = svc.create_sweep(session, body=body, settings=settings)
    return svc.sweep_detail(session, sweep_id=sweep.id, settings=settings)


@router.get("", response_model=list[SweepPublic])
def list_sweeps(session: SessionDep) -> list[SweepPublic]:
    """The 200 newest sweeps, with their trials counted by status."""
    return svc.list_sweeps(session)


@router.get("/{sweep_id}", response_model=SweepDetail)
def get_sweep(sweep_id: SweepId, session: SessionDep, settings: SettingsDep) -> SweepDetail:
    """Config, status, trials (options, status, step reached, objective), the best trial and, once enough
    trials have finished, each searched option's importance (fANOVA)."""
    return svc.sweep_detail(session, sweep_id=sweep_id, settings=settings)


@router.patch("/{sweep_id}", response_model=SweepDetail)
def update_sweep(sweep_id: SweepId, body: SweepUpdate, session: SessionDep, settings: SettingsDep) -> SweepDetail:
    """The sweep's notes (Markdown; a W&B config's ``description`` starts them)."""
    svc.update_sweep(session, sweep_id=sweep_id, body=body)
    return svc.sweep_detail(session, sweep_id=sweep_id, settings=settings)


@router.post("/{sweep_id}/cancel", response_model=SweepDetail)
def cancel_sweep(sweep_id: SweepId, session: SessionDep, settings: SettingsDep) -> SweepDetail:
    """Cancel the sweep: its queued trials at once, its running ones at their next step."""
    svc.cancel_sweep(session, sweep_id=sweep_id, settings=settings)
    return svc.sweep_detail(session, sweep_id=sweep_id, settings=settings)


@router.delete("/{sweep_id}", status_code=204)
def delete_sweep(sweep_id: SweepId, session: SessionDep, settings: SettingsDep) -> Response:
    """The sweep, its trials (runs) and their files, and its study."""
    svc.delete_sweep(session, sweep_id=sweep_id, settings=settings)
    return Response(status_code=204)
