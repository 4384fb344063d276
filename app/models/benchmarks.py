"""Benchmark runs: a sweep over batch sizes and precisions, and its cells."""

from __future__ import annotations

from pydantic import (
    field_validator,
)
from sqlmodel import Field, SQLModel

from tinygpt.device_names import check_device_name, check_precision_name
from tinygpt.run_config import OPTIONS

from .common import InputModel
from .runs import RunPublic


class BenchmarkCreate(InputModel):
    """POST /api/benchmarks: a sweep over batch sizes x precisions (x CPU thread counts) for one device."""

    preset: str = "holmes"
    arch: str | None = None
    device: str = "auto"
    batch_sizes: list[int] = Field(default_factory=lambda: [8, 16, 32], min_length=1, max_length=12)
    precisions: list[str] | None = Field(default=None, max_length=4, description="default: what the device supports")
    threads: list[int] | None = Field(default=None, max_length=12, description="CPU thread counts (CPU only)")
    steps: int = Field(default=5, ge=1, le=100, description="timed steps per cell")
    warmup: int = Field(default=2, ge=0, le=20, description="untimed steps per cell")
    name: str | None = Field(default=None, max_length=200)
    tags: list[str] = Field(default_factory=list, max_length=50)

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, v: str) -> str:
        return OPTIONS["preset"].check(v)

    @field_validator("arch")
    @classmethod
    def _known_arch(cls, v: str | None) -> str | None:
        return OPTIONS["arch"].check(v)

    @field_validator("device")
    @classmethod
    def _device_name(cls, v: str) -> str:
        return check_device_name(v)

    @field_validator("batch_sizes")
    @classmethod
    def _batch_sizes(cls, v: list[int]) -> list[int]:
        if any(not 1 <= b <= 4096 for b in v):
            raise ValueError("each batch size must be in [1, 4096]")
        return v

    @field_validator("precisions")
    @classmethod
    def _precisions(cls, v: list[str] | None) -> list[str] | None:
        for p in v or []:
            check_precision_name(p)
        return v

    @field_validator("threads")
    @classmethod
    def _threads(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and any(not 1 <= t <= 1024 for t in v):
            raise ValueError("each thread count must be in [1, 1024]")
        return v


class BenchmarkResult(SQLModel, table=True):
    __tablename__ = "benchmark_results"

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", index=True, ondelete="CASCADE")
    preset: str
    device: str
    precision: str
    batch_size: int
    threads: int | None = None
    tokens_per_sec: float | None = None
    ms_per_step: float | None = None
    peak_mem_mib: float | None = None
    oom: bool = False


class BenchmarkCellPublic(SQLModel):
    precision: str
    batch_size: int
    threads: int | None
    tokens_per_sec: float | None
    ms_per_step: float | None
    peak_mem_mib: float | None
    oom: bool


class BenchmarkPublic(SQLModel):
    """A benchmark run and the cells measured so far."""

    run: RunPublic
    preset: str
    cells: list[BenchmarkCellPublic]
