"""Shared by every entity: time in UTC, and the base of every input model (unknown fields refused)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import (
    ConfigDict,
    ValidationError,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError
from sqlmodel import SQLModel

from tinygpt.options import unknown_name_message

#: The largest id, cursor or offset a request may name: the database's integers are 64-bit (beyond: a 422,
#: never a database error).
MAX_INT64 = 2**63 - 1


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(moment: datetime) -> datetime:
    """SQLite hands datetimes back without their zone; they were written in UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)



class InputModel(SQLModel):
    """What a request may send: an unknown field is refused (422 naming it), never dropped, and the message
    names the field it most likely meant: "unknown field 'learning_rate': did you mean 'lr'?". (A class
    keyword ``extra="forbid"`` is silently ignored by SQLModel: the config is set here.)"""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="wrap")
    @classmethod
    def _name_unknown_fields(cls, data: Any, handler: Any) -> Any:
        try:
            return handler(data)
        except ValidationError as exc:
            errors = exc.errors()
            if not any(e["type"] == "extra_forbidden" and len(e["loc"]) == 1 for e in errors):
                raise
            known = list(cls.model_fields)
            raise ValidationError.from_exception_data(exc.title, [  # this level's unknown fields, explained
                InitErrorDetails(type=PydanticCustomError(
                    e["type"], unknown_name_message(str(e["loc"][0]), known)
                    if e["type"] == "extra_forbidden" and len(e["loc"]) == 1 else e["msg"]),
                    loc=e["loc"], input=e.get("input")) for e in errors]) from None
