"""REST routes for groups of runs (a submission's seeds or devices, or runs put together by hand): read one,
rename it. Thin wrappers over app.services.groups."""

from __future__ import annotations

from fastapi import APIRouter

from ..deps import GroupId, SessionDep
from ..models import RunGroupPublic, RunGroupUpdate
from ..services import groups as svc

router = APIRouter(prefix="/api/groups", tags=["groups"])


@router.get("/{group_id}", response_model=RunGroupPublic)
async def get_group(group_id: GroupId, session: SessionDep) -> RunGroupPublic:
    return svc.group_public(session, group_id=group_id)


@router.patch("/{group_id}", response_model=RunGroupPublic)
def rename_group(group_id: GroupId, body: RunGroupUpdate, session: SessionDep) -> RunGroupPublic:
    """A new name, shown wherever the group is (compare, run page, export)."""
    return svc.rename_group(session, group_id=group_id, body=body)
