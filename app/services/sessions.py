"""Browser sessions: what the login cookie stands for (``/login``, ``/logout``; ``app/security.py``).

The cookie holds a random secret; the database keeps its SHA-256 only (a copy of the database logs no one
in), with the token it was granted for and when it expires (``TINYGPT_SESSION_DAYS``). ``/logout``
deletes the row, so a copied cookie stops working too; a new ``TINYGPT_API_TOKEN`` ends every session
(their token fingerprint no longer matches).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import timedelta

from pydantic import SecretStr
from sqlalchemy import delete
from sqlmodel import Session, col

from ..models import BrowserSession, as_utc, utcnow


def token_fingerprint(token: SecretStr) -> str:
    """Derived from the token, never the token: which token a session was granted for."""
    return hmac.new(token.get_secret_value().encode(), b"tinygpt browser session", hashlib.sha256).hexdigest()


def secret_id(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def start_session(session: Session, *, token: SecretStr, days: float) -> str:
    """A new session (commits); returns the cookie's secret. Expired sessions are cleared on the way."""
    session.exec(delete(BrowserSession).where(col(BrowserSession.expires_at) < utcnow()))  # type: ignore[call-overload]
    secret = secrets.token_urlsafe(32)
    session.add(BrowserSession(id=secret_id(secret), token_fingerprint=token_fingerprint(token),
                               expires_at=utcnow() + timedelta(days=days)))
    session.commit()
    return secret


def session_is_valid(session: Session, *, secret: str, token: SecretStr) -> bool:
    """A live session granted for this token (compared in constant time)."""
    if not secret or len(secret) > 200:
        return False
    row = session.get(BrowserSession, secret_id(secret))
    return (row is not None and as_utc(row.expires_at) > utcnow()
            and hmac.compare_digest(row.token_fingerprint, token_fingerprint(token)))


def end_session(session: Session, *, secret: str) -> None:
    """Logging out (commits): the cookie's session is gone, wherever a copy of the cookie is."""
    if secret and len(secret) <= 200:
        session.exec(delete(BrowserSession).where(col(BrowserSession.id) == secret_id(secret)))  # type: ignore[call-overload]
        session.commit()
