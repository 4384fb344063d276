"""REST routes the W&B-style drop-in (``tinygpt/wandb_dropin/wandb``) calls: ``wandb.init``, ``wandb.log`` and
``wandb.finish``; thin wrappers over app.services.wandb_runs. Token-guarded like every write (the drop-in sends
``WANDB_API_KEY`` as the bearer token)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from ..deps import RunId, SessionDep, SettingsDep
from ..models import Run
from ..models.wandb import WandbAck, WandbFinish, WandbLog, WandbRunCreate
from ..services import wandb_runs as svc

router = APIRouter(prefix="/api/wandb/runs", tags=["W&B-style runs"])


def ack(run: Run) -> WandbAck:
    return WandbAck(id=run.id, url=f"/runs/{run.id}", cancel_requested=run.cancel_requested)


@router.post("", status_code=201, response_model=WandbAck)
def create_run(body: WandbRunCreate, session: SessionDep, settings: SettingsDep, response: Response) -> WandbAck:
    """``wandb.init``: a run, created running (no worker claims it); the same ``client_id`` again answers 200."""
    run, created = svc.create_run(session, body=body, settings=settings)
    if not created:
        response.status_code = 200
    return ack(run)


@router.post("/{run_id}/log", response_model=WandbAck)
def log(run_id: RunId, body: WandbLog, session: SessionDep, settings: SettingsDep) -> WandbAck:
    """``wandb.log`` rows, ``wandb.config`` and ``wandb.summary`` changes; none: a heartbeat. The answer says
    whether someone asked the run to stop (the drop-in then interrupts the script, as Ctrl-C does)."""
    return ack(svc.log(session, run_id=run_id, body=body, settings=settings))


@router.post("/{run_id}/finish", response_model=WandbAck)
def finish(run_id: RunId, body: WandbFinish, session: SessionDep, settings: SettingsDep) -> WandbAck:
    """``wandb.finish``: the run ends succeeded (exit code 0), cancelled (it was asked to stop) or failed."""
    return ack(svc.finish(session, run_id=run_id, body=body, settings=settings))
