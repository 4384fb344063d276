"""Datasets: the corpora runs train on."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, BigInteger, Column
from sqlmodel import Field, SQLModel

from .common import utcnow


# -- datasets and benchmarks -------------------------------------------------------------------
class Dataset(SQLModel, table=True):
    __tablename__ = "datasets"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(unique=True, index=True)
    sha256: str
    bytes: int = Field(sa_type=BigInteger)
    chars: int = Field(sa_type=BigInteger)
    path: str
    builtin: bool = False
    tokenizers: list = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow)
    target_val_loss: float | None = None  # its runs' default target (time to target), given at upload


class DatasetPublic(SQLModel):
    name: str
    sha256: str
    bytes: int
    chars: int
    builtin: bool
    tokenizers: list
    created_at: datetime
    target_val_loss: float | None = Field(default=None, description="its runs' default target_val_loss: given at "
                                          "upload, or a known corpus' (holmes: 3.76)")
