"""Benchmark runs: create, read, record cells, and estimate a training run's speed from them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import delete as sa_delete
from sqlmodel import Session, col, select

from ..errors import NotFound
from ..models import (
    BenchmarkCellPublic,
    BenchmarkCreate,
    BenchmarkPublic,
    BenchmarkResult,
    EventType,
    Run,
    RunKind,
    RunPublic,
    RunStatus,
)
from ..settings import Settings
from .devices import check_device_available, check_threads
from .events import record_event
from .lifecycle import new_run

if TYPE_CHECKING:
    from tinygpt.bench import Cell  # recorded here, measured by the job: the app never imports torch for it


def create_benchmark(session: Session, *, body: BenchmarkCreate, settings: Settings) -> Run:
    check_device_available(body.device)
    check_threads(body.threads or [])
    config = body.model_dump(exclude={"device", "name", "tags"})
    name = body.name or f"benchmark {body.preset} [{body.device}]"
    run = new_run(session, name=name, config=config, settings=settings, requested_device=body.device,
                  kind=RunKind.benchmark, tags=body.tags)
    session.commit()
    return run


def get_benchmark_run(session: Session, *, run_id: int) -> Run:
    run = session.get(Run, run_id)
    if run is None or run.kind != RunKind.benchmark:
        raise NotFound(f"benchmark {run_id} does not exist")
    return run


def cells_of(session: Session, run_id: int) -> list[BenchmarkResult]:
    return list(session.exec(select(BenchmarkResult).where(BenchmarkResult.run_id == run_id)
                             .order_by(col(BenchmarkResult.id))))


def benchmark_public(session: Session, run: Run) -> BenchmarkPublic:
    cells = [BenchmarkCellPublic.model_validate(c.model_dump()) for c in cells_of(session, run.id)]
    return BenchmarkPublic(run=RunPublic.of(run), preset=run.config["preset"], cells=cells)


def get_benchmark(session: Session, *, run_id: int) -> BenchmarkPublic:
    return benchmark_public(session, get_benchmark_run(session, run_id=run_id))


def list_benchmarks(session: Session, *, limit: int = 100) -> list[BenchmarkPublic]:
    runs = session.exec(select(Run).where(Run.kind == RunKind.benchmark).order_by(col(Run.id).desc()).limit(limit))
    return [benchmark_public(session, r) for r in runs]


def start_sweep(session: Session, *, run_id: int, cells: int) -> None:
    """A (re)started sweep: forget cells of an earlier attempt, and record how many cells to expect."""
    session.exec(sa_delete(BenchmarkResult).where(col(BenchmarkResult.run_id) == run_id))
    run = session.get(Run, run_id)
    run.config = {**run.config, "cells": cells}
    run.last_step = 0
    session.add(run)


def record_cell(session: Session, *, run_id: int, index: int, cell: Cell) -> None:
    """Store one measured cell, advance the run's progress and tell watchers (a log event)."""
    run = session.get(Run, run_id)
    session.add(BenchmarkResult(run_id=run_id, preset=run.config["preset"], device=run.device or run.requested_device,
                                precision=cell.precision, batch_size=cell.batch_size, threads=cell.threads,
                                tokens_per_sec=cell.tokens_per_sec, ms_per_step=cell.ms_per_step,
                                peak_mem_mib=cell.peak_mem_mib, oom=cell.oom))
    run.last_step = index + 1
    session.add(run)
    threads = f", {cell.threads} threads" if cell.threads else ""
    result = "out of memory" if cell.oom else f"{cell.tokens_per_sec:,.0f} tok/s, {cell.ms_per_step:,.1f} ms/step"
    record_event(session, run_id=run_id, type=EventType.log,
                 data={"message": f"{cell.precision}, batch {cell.batch_size}{threads}: {result}",
                       "cell": index + 1})


def speed_estimates(session: Session) -> list[dict]:
    """The latest measured tokens/s per (preset, device, precision, batch size): for time estimates.

    Thread sweeps count with their fastest thread count.
    """
    stmt = (select(BenchmarkResult).join(Run, col(Run.id) == col(BenchmarkResult.run_id))
            .where(Run.status == RunStatus.succeeded, col(BenchmarkResult.oom).is_(False))
            .order_by(col(BenchmarkResult.id)))
    latest: dict[tuple, dict] = {}
    for r in session.exec(stmt):
        key = (r.preset, r.device, r.precision, r.batch_size)
        entry = latest.get(key)
        if entry is None or entry["run_id"] != r.run_id or (r.tokens_per_sec or 0) > entry["tokens_per_sec"]:
            latest[key] = {"preset": r.preset, "device": r.device, "precision": r.precision,
                           "batch_size": r.batch_size, "tokens_per_sec": r.tokens_per_sec, "run_id": r.run_id}
    return list(latest.values())
