"""Workers: who is working, under which name."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, Column
from sqlmodel import Field, SQLModel

from .common import utcnow


# -- workers ---------------------------------------------------------------------------------------
class WorkerRecord(SQLModel, table=True):
    """A worker process, registered while it runs: its name is unique among live workers, and its host
    and pid tell whether it is still alive (see ``worker/registry.py``)."""

    __tablename__ = "workers"

    name: str = Field(primary_key=True)
    host: str
    pid: int
    devices: list = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    started_at: datetime = Field(default_factory=utcnow)
    heartbeat_at: datetime = Field(default_factory=utcnow)
    stopped_at: datetime | None = None
