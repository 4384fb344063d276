"""Browser sessions (the login cookie stands for one)."""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Field, SQLModel

from .common import utcnow


class BrowserSession(SQLModel, table=True):
    """A browser's login (``/login``): the cookie holds a random secret; only its hash is kept here, with
    the token it was granted for (a fingerprint: a new token ends every session) and its expiry."""

    __tablename__ = "browser_sessions"

    id: str = Field(primary_key=True, max_length=64)  # sha256 of the cookie's secret, hex
    token_fingerprint: str = Field(max_length=64)
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime = Field(index=True)
