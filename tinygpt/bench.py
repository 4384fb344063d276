"""Hardware benchmark: training-step speed over batch sizes x precisions (x CPU thread counts).

Each cell builds the preset's model, runs a few warm-up steps (not timed), then times
``steps`` full training steps (forward, backward, AdamW) on random tokens, so the cost
does not depend on the text. GPU work is synchronized before the clock is read. A cell
that runs out of memory is recorded as ``oom`` and the sweep goes on.

>>> cells = sweep(SweepConfig(preset="tiny", device="cpu", batch_sizes=[2], precisions=["fp32"],
...                           steps=1, warmup=0))  # doctest: +SKIP
>>> cells[0].tokens_per_sec > 0  # doctest: +SKIP
True
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch

from . import device as dev
from .device_names import check_device_name, check_precision_name
from .model import GPT
from .optimization import make_optimizer
from .presets import model_config
from .run_config import TrainConfig
from .train import train_step

CELL_FIELDS = ["precision", "batch_size", "threads", "tokens_per_sec", "ms_per_step", "peak_mem_mib", "oom"]


@dataclass
class Cell:
    """One measured point of a sweep (the fields of ``tinygpt bench --json``)."""

    precision: str
    batch_size: int
    threads: int | None
    tokens_per_sec: float | None = None
    ms_per_step: float | None = None
    peak_mem_mib: float | None = None
    oom: bool = False
    error: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class SweepConfig:
    preset: str
    device: str = "auto"
    arch: str | None = None
    batch_sizes: list[int] = field(default_factory=lambda: [8, 16, 32])
    precisions: list[str] | None = None  # None: what the device supports (see default_precisions)
    threads: list[int] | None = None  # CPU only; None: PyTorch's default thread count
    steps: int = 5
    warmup: int = 2

    def validate(self) -> SweepConfig:
        model_config(self.preset, self.arch)  # raises for an unknown preset or arch
        check_device_name(self.device)
        for name, values in (("batch_sizes", self.batch_sizes), ("threads", self.threads or [1])):
            if not values or any(v < 1 for v in values):
                raise ValueError(f"{name} must be positive integers, got {values}")
        for p in self.precisions or []:
            check_precision_name(p)
        if self.steps < 1 or self.warmup < 0:
            raise ValueError(f"steps must be >= 1 and warmup >= 0, got {self.steps} and {self.warmup}")
        return self


def default_precisions(device: torch.device) -> list[str]:
    """GPU: fp32, bf16 (when supported), fp16. CPU: fp32, and bf16 where the CPU does bf16 in hardware."""
    if device.type == "cuda":
        return ["fp32", "bf16", "fp16"] if torch.cuda.is_bf16_supported() else ["fp32", "fp16"]
    if device.type in ("mps", "xla"):
        return ["fp32", "bf16"]
    return ["fp32", "bf16"] if dev.cpu_has_bf16() else ["fp32"]


def plan(config: SweepConfig, device: torch.device) -> list[Cell]:
    """The cells a sweep will measure, in order (thread counts only on the CPU)."""
    precisions = config.precisions or default_precisions(device)
    threads: list[int | None] = list(config.threads) if config.threads and device.type == "cpu" else [None]
    return [Cell(precision=p, batch_size=b, threads=t) for t in threads for p in precisions for b in config.batch_sizes]


def measure(cell: Cell, config: SweepConfig, device: torch.device) -> Cell:
    """Fill in one cell's figures (or ``oom``)."""
    precision = dev.resolve_precision(cell.precision, device)
    default_threads = torch.get_num_threads()
    dev.set_threads(cell.threads)
    dev.keep_freed_memory()
    try:
        seconds = time_steps(config, device, precision, cell.batch_size)
        tokens = cell.batch_size * model_config(config.preset, config.arch).context
        cell.ms_per_step = 1000 * seconds
        cell.tokens_per_sec = tokens / seconds
        cell.peak_mem_mib = dev.peak_memory_mib(device)
    except Exception as exc:
        if not dev.is_out_of_memory(exc):
            raise
        cell.oom, cell.error = True, str(exc).splitlines()[0][:300]
    finally:
        gc.collect()  # the cell's model and optimizer state, before the next cell measures memory
        dev.empty_cache(device)
        torch.set_num_threads(default_threads)
    return cell


def time_steps(config: SweepConfig, device: torch.device, precision: str, batch_size: int) -> float:
    """Seconds per training step (forward, backward, AdamW) on random tokens, after warm-up."""
    mconf = model_config(config.preset, config.arch)
    torch.manual_seed(0)
    model = GPT(mconf).to(device)
    train_config = TrainConfig(preset=config.preset, arch=config.arch)
    optimizer = make_optimizer(model, train_config, device)
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
    generator = torch.Generator().manual_seed(0)

    def step() -> None:
        x = torch.randint(mconf.vocab_size, (batch_size, mconf.context + 1), generator=generator).to(device)
        batch = (x[:, :-1], x[:, 1:])  # (B, T) inputs and next-token targets
        train_step(model, optimizer, [batch], device=device, precision=precision, config=train_config, scaler=scaler)

    for _ in range(config.warmup):
        step()
    dev.synchronize(device)
    dev.reset_peak_memory(device)
    t0 = time.perf_counter()
    for _ in range(config.steps):
        step()
    dev.synchronize(device)
    return (time.perf_counter() - t0) / config.steps


def sweep(
    config: SweepConfig,
    on_cell: Callable[[int, int, Cell], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> list[Cell]:
    """Measure every cell of ``plan``; ``on_cell(index, total, cell)`` after each one."""
    config.validate()
    device = dev.resolve_device(config.device)
    cells = plan(config, device)
    done = []
    for i, cell in enumerate(cells):
        if should_stop and should_stop():
            break
        done.append(measure(cell, config, device))
        if on_cell:
            on_cell(i, len(cells), cell)
    return done


def format_table(cells: list[Cell]) -> str:
    """The sweep as a fixed-width text table (what ``tinygpt bench`` prints)."""
    rows = [("precision", "batch", "threads", "tokens/s", "ms/step", "peak MiB")]
    for c in cells:
        if c.oom:
            figures = ("OOM", "-", "-")
        else:
            figures = (f"{c.tokens_per_sec:,.0f}", f"{c.ms_per_step:,.1f}", f"{c.peak_mem_mib:,.0f}")
        rows.append((c.precision, str(c.batch_size), str(c.threads or "default"), *figures))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in rows)
