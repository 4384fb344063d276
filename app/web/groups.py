"""A group of runs renamed on the compare and run pages: the form posts (htmx), the page reloads with the new name
wherever the group is shown. The API renames with ``PATCH /api/groups/{id}``."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from ..deps import GroupId, SessionDep
from ..errors import Invalid
from ..models import RunGroupUpdate
from ..services import groups as svc

router = APIRouter(include_in_schema=False)


@router.post("/partials/groups/{group_id}/name")
async def rename_group(group_id: GroupId, request: Request, session: SessionDep) -> Response:
    """The name posted, checked as the API checks it (422 naming ``name``, shown beside the form)."""
    try:
        update = RunGroupUpdate(name=str((await request.form()).get("name", "")).strip())
    except ValidationError as exc:
        raise Invalid(exc.errors()[0]["msg"], field="name") from None
    await run_in_threadpool(lambda: svc.rename_group(session, group_id=group_id, body=update))
    return Response(status_code=200, headers={"HX-Refresh": "true"})
