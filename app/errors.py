"""Errors that carry their HTTP status; one handler (app/main.py) renders them."""

from __future__ import annotations

from pydantic import ValidationError


class AppError(Exception):
    status_code = 400

    def __init__(self, message: str, *, field: str | None = None, status_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        if status_code is not None:
            self.status_code = status_code

    def headers(self) -> dict[str, str]:
        """Headers the answer carries besides its status."""
        return {}

    def detail(self) -> list[dict] | str:
        """``field`` may be a path, ``parameters.lr``: its parts go into ``loc`` as pydantic's would."""
        if self.field:
            return [{"loc": ["body", *self.field.split(".")], "msg": self.message, "type": "value_error"}]
        return self.message


class NotFound(AppError):
    status_code = 404


class Conflict(AppError):
    status_code = 409


class Invalid(AppError):
    """422 naming the field, shaped like FastAPI's own validation errors."""

    status_code = 422


class TooLarge(AppError):
    status_code = 413


class TooManyRequests(AppError):
    """429; with ``retry_after``, the seconds the client should wait (the ``Retry-After`` header)."""

    status_code = 429

    def __init__(self, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)} if self.retry_after else {}


def invalid_from(exc: ValidationError, *, under: str | None = None, default: str = "config") -> Invalid:
    """Pydantic's first error as an ``Invalid`` naming its field path (``under.FIELD``), in the words
    the library gave it (without pydantic's "Value error, ")."""
    error = exc.errors()[0]
    path = ".".join(str(part) for part in error["loc"])
    field = ".".join(part for part in (under, path) if part) or default
    return Invalid(error["msg"].removeprefix("Value error, "), field=field)
