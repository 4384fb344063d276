"""Helpers shared by the benchmark scripts: the corpus path, the machine description, timing."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from tinygpt.device import cpu_name

ROOT = Path(__file__).resolve().parent.parent


def holmes_path() -> Path:
    """The Holmes corpus: $TINYGPT_HOLMES_PATH, else ../shared/data/holmes.txt beside the repository."""
    env = os.environ.get("TINYGPT_HOLMES_PATH")
    path = Path(env) if env else ROOT.parent / "shared" / "data" / "holmes.txt"
    if not path.exists():
        raise SystemExit(f"benchmark corpus not found at {path}; set TINYGPT_HOLMES_PATH")
    return path


def machine() -> str:
    return (
        f"{cpu_name()}, {os.cpu_count()} cores ({torch.get_num_threads()} torch threads, "
        f"{torch.backends.cpu.get_cpu_capability()}), {platform.system()} {platform.machine()}, "
        f"Python {platform.python_version()}, torch {torch.__version__}"
    )


def best_time(fn: Callable[[], object], repeat: int = 3) -> float:
    """Best wall time of ``repeat`` calls (the least disturbed by other load)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def median(xs: list[float]) -> float:
    return statistics.median(xs)
