"""This machine's devices and what a run may ask of them: device availability, processes and threads, and
memory (a run that cannot fit is refused before it is queued).

The CPU needs no probe; the other backends are probed through torch on first need (the form's device list, a
run asking for ``auto``, ``cuda``, ``mps`` or ``xla``), so that the app starts without importing it."""

from __future__ import annotations

import os
from functools import lru_cache

from ..errors import Invalid
from ..models import RunCreate, library_config
from ..settings import Settings


@lru_cache
def machine_devices() -> tuple[dict, ...]:
    """This machine's devices (probed once per process: cheap after the first call)."""
    from tinygpt.device import available_devices  # torch: on first need (module docstring)

    return tuple(available_devices())

def check_device_available(name: str) -> None:
    if name in ("auto", "cpu"):
        return
    devices = {d["device"]: d for d in machine_devices()}
    if name in devices and devices[name]["available"]:
        return
    family = name.split(":")[0]
    if family == "cuda" and any(d["device"].startswith("cuda:") and d["available"] for d in devices.values()):
        if name == "cuda":
            return
        raise Invalid(f"device {name!r} does not exist on this machine", field="device")
    reason = devices.get(family, {}).get("reason") or "not found"
    raise Invalid(f"device {name!r} is not available on this machine: {reason}", field="device")

def process_limit(device: str) -> tuple[int, str]:
    """How many training processes a run on ``device`` may start here, and what bounds it: the visible
    GPUs on CUDA, the cores elsewhere (each gloo process is a whole training process on the CPU)."""
    if device.startswith("cuda") or (device == "auto" and any(d["device"].startswith("cuda:") for d in machine_devices())):
        count = sum(1 for d in machine_devices() if d["device"].startswith("cuda:") and d["available"])
        return count, f"the {count} visible GPU{'s' if count != 1 else ''}"
    cores = os.cpu_count() or 1
    return cores, f"this machine's {cores} CPU core{'s' if cores != 1 else ''}"

def check_machine_limits(body: RunCreate, devices: list[str]) -> None:
    """``gpus`` and ``threads`` bounded by what this machine can run (one request must not start 64 processes)."""
    for device in devices:
        limit, what = process_limit(device)
        if body.gpus > limit:
            raise Invalid(f"gpus must be at most {limit} on {device} ({what})", field="gpus")
    check_threads([body.threads] if body.threads else [])

TORCH_OVERHEAD_MIB = 300  # a training process's own memory before any tensor (PyTorch, Python, the data)

def memory_limit_mib(device: str, settings: Settings) -> tuple[float | None, str, bool]:
    """What one run may use on ``device``: (MiB, said how, whether its processes share it).
    ``TINYGPT_JOB_MEMORY_MB`` caps each process when set; else the machine's memory (CPU: shared by a
    run's processes) or one GPU's (CUDA: a process each); None where unknown (MPS, XLA)."""
    if settings.job_memory_mb is not None:
        return settings.job_memory_mb, f"TINYGPT_JOB_MEMORY_MB ({settings.job_memory_mb} MB a process)", False
    devices = {} if device == "cpu" else {d["device"]: d for d in machine_devices()}
    if device in ("auto", "cuda"):
        device = next((name for name in devices if name.startswith("cuda:")), "cpu")
    if device == "cpu":
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
        return total, f"this machine's {total / 1024:.1f} GiB of memory", True
    memory = ((devices.get(device) or {}).get("description") or {}).get("memory_mib")
    return memory, f"{device}'s {(memory or 0) / 1024:.1f} GiB", False

def check_memory_fits(body: RunCreate, devices: list[str], settings: Settings) -> None:
    """Refuse a run that cannot fit the device it asks for (without a job memory cap it would take the
    machine down), naming the estimate (``tinygpt.run_config.TrainConfig.memory_estimate``, a lower bound)."""
    per_process = library_config(body).memory_estimate(body.gpus) / 2**20 + TORCH_OVERHEAD_MIB
    for device in devices:
        limit, what, shared = memory_limit_mib(device, settings)
        need = per_process * body.gpus if shared else per_process
        if limit is not None and need > limit:
            raise Invalid(f"this run needs at least about {need / 1024:.1f} GiB to train (weights, optimizer and "
                          f"activations at batch_size {body.batch_size}) but has {what}: lower batch_size or "
                          "context, or turn on grad_checkpointing", field="batch_size")

def check_threads(counts: list[int]) -> None:
    cores = os.cpu_count() or 1
    if any(t > cores for t in counts):
        raise Invalid(f"threads must be at most this machine's {cores} CPU cores", field="threads")
