"""Annotated dependencies shared by the routes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Path
from sqlmodel import Session

from .db import get_engine
from .settings import Settings, get_settings


def get_session() -> Iterator[Session]:
    with Session(get_engine(), expire_on_commit=False) as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_settings)]

#: A run's id in a path: a positive 64-bit integer (anything else is a 422, never a database error).
RunId = Annotated[int, Path(ge=1, le=2**63 - 1, description="a run's id")]
