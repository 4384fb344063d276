"""Alerts and their webhook deliveries."""

from __future__ import annotations

import enum
from datetime import datetime

from sqlalchemy import Column, Index, Text, UniqueConstraint
from sqlmodel import Field, SQLModel

from .common import utcnow


class Alert(enum.StrEnum):
    """What a webhook (and the page's desktop notification) can tell: ``alert`` events' ``kind``."""

    finished = "finished"  # succeeded
    failed = "failed"
    crashed = "crashed"
    pruned = "pruned"
    stopped_early = "stopped_early"  # succeeded before its last step: early stopping
    nonfinite_loss = "nonfinite_loss"  # failed: NaN or infinite loss or gradient norm
    overfitting = "overfitting"  # validation loss above its best for 2 evaluations in a row
    stalled = "stalled"  # no step for max(stall_after_sec, 10 x the median step time)
    sweep_finished = "sweep_finished"



class DeliveryState(enum.StrEnum):
    pending = "pending"  # to send (again) at next_at
    sending = "sending"  # taken by a notifier; never sent twice, even if it died while sending
    sent = "sent"
    failed = "failed"  # gave up after WEBHOOK_ATTEMPTS tries, or its notifier died mid-send


class WebhookDelivery(SQLModel, table=True):
    """One alert (an ``alert`` event) to one webhook URL: at most one POST succeeds per pair."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (UniqueConstraint("event_id", "url", name="uq_webhook_deliveries_event_url"),
                      Index("ix_webhook_deliveries_state_next_at", "state", "next_at"))

    id: int | None = Field(default=None, primary_key=True)
    event_id: int = Field(index=True)
    url: str
    state: str = Field(default=DeliveryState.pending)
    attempts: int = 0
    next_at: datetime = Field(default_factory=utcnow)
    sent_at: datetime | None = None
    last_error: str | None = Field(default=None, sa_column=Column(Text))
