"""The event outbox: every change anyone may watch, in order."""

from __future__ import annotations

import enum
from datetime import datetime

from sqlalchemy import JSON, Column, Index
from sqlmodel import Field, SQLModel

from .common import utcnow


class EventType(enum.StrEnum):
    created = "created"
    status = "status"
    metric = "metric"
    sample = "sample"
    log = "log"
    resolved = "resolved"  # what a run's job resolved: device, its description, precision, parameters
    best_checkpoint = "best_checkpoint"  # a new best checkpoint: step and validation loss
    trial = "trial"  # on a sweep's stream: a trial created, evaluated, pruned or finished
    sweep = "sweep"  # on a sweep's stream: the sweep's status changed (its end)
    alert = "alert"  # something to tell people (``Alert``): the webhooks' outbox
    stall = "stall"  # a run stalled (``stalled``: true) or moves again (false)
    overfit = "overfit"  # at each evaluation: the best one, and since when the run overfits (None: it does not)
    target = "target"  # a run reached its target validation loss: its time_to_target (RunPublic's)



class Event(SQLModel, table=True):
    """Append-only outbox: every change anyone may watch, in order. Its id is the SSE event id."""

    __tablename__ = "events"
    # event ids only ever grow (Last-Event-ID relies on it), even after the newest events are deleted
    __table_args__ = (Index("ix_events_run_id_id", "run_id", "id"),
                      Index("ix_events_type_created_at", "type", "created_at"),  # the outbox's compaction
                      {"sqlite_autoincrement": True})

    id: int | None = Field(default=None, primary_key=True)
    run_id: int | None = Field(default=None)
    sweep_id: int | None = Field(default=None, index=True)
    type: str
    data: dict = Field(sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow)
