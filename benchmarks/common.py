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
from tinygpt.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parent.parent


def holmes_path() -> Path:
    """The Holmes corpus: $TINYGPT_HOLMES_PATH, else ../shared/data/holmes.txt beside the repository."""
    env = os.environ.get("TINYGPT_HOLMES_PATH")
    path = Path(env) if env else ROOT.parent / "shared" / "data" / "holmes.txt"
    if not path.exists():
        raise SystemExit(f"benchmark corpus not found at {path}; set TINYGPT_HOLMES_PATH")
    return path


def random_tokens(vocab_size: int, count: int) -> tuple[torch.Tensor, Tokenizer]:
    """``count`` random token ids below ``vocab_size`` (a step's cost does not depend on them) and a stand-in
    tokenizer that defines every one of them (two bytes each): what a trainer needs of its data."""
    tokens = torch.randint(vocab_size, (count,), generator=torch.Generator().manual_seed(0))
    return tokens, Tokenizer([(i % 256, (7 * i + 1) % 256) for i in range(vocab_size - 256)])


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


def best_times_interleaved(fns: dict[str, Callable[[], object]], rounds: int = 5) -> dict[str, float]:
    """Best wall time of each function over ``rounds`` alternating rounds (A, B, A, B, ...).

    Alternating spreads a burst of load from other tenants over every contender instead
    of one, so the ratio of the best times is what the code, not the moment, decides.
    """
    best = {name: float("inf") for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def median(xs: list[float]) -> float:
    return statistics.median(xs)
