"""Annotated dependencies shared by the routes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Path, Request
from sqlmodel import Session

from .db import get_engine
from .models import MAX_INT64
from .models.groups import GROUP_ID_MAX
from .services.sampling import ModelCache
from .settings import Settings


def app_settings(request: Request) -> Settings:
    """The settings the app was built with (``create_app``): one object for every route, page and stream."""
    return request.app.state.settings


async def get_session(request: Request) -> AsyncIterator[Session]:
    """One session per request. An async dependency on purpose: FastAPI closes a sync one in a
    worker thread, one close at a time, so under load the requests' connections wait on those
    closes while the threads wait for connections (the app stalled at 100 requests/s; closing
    here, on the event loop, hands a connection back at once)."""
    with Session(get_engine(app_settings(request)), expire_on_commit=False) as session:
        yield session


def app_models(request: Request) -> ModelCache:
    """The app's loaded models, for the sample box and nearest tokens (bounded loads)."""
    return request.app.state.models


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(app_settings)]
ModelsDep = Annotated[ModelCache, Depends(app_models)]

#: A run's id in a path: a positive 64-bit integer.
RunId = Annotated[int, Path(ge=1, le=MAX_INT64, description="a run's id")]
#: A sweep's id in a path.
SweepId = Annotated[int, Path(ge=1, le=MAX_INT64, description="a sweep's id")]
#: A group's id in a path (a run's ``group_id``).
GroupId = Annotated[str, Path(min_length=1, max_length=GROUP_ID_MAX, description="a group's id (a run's group_id)")]
