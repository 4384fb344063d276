"""Devices and precision: which backend to run on, and in which number format.

>>> resolve_device("cpu")
device(type='cpu')
>>> resolve_precision("fp32", torch.device("cpu"))
'fp32'

A backend the machine lacks is not an error: :func:`resolve_device` logs a warning
and returns the CPU, so a run asked for ``cuda`` on a laptop still runs.
On Apple GPUs, set ``PYTORCH_ENABLE_MPS_FALLBACK=1`` before starting Python so that
operators MPS lacks fall back to the CPU instead of raising.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import platform
import resource
import sys
from functools import cache
from pathlib import Path

import torch

from .device_names import Precision, check_device_name, check_precision_name

log = logging.getLogger(__name__)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def xla_available() -> bool:
    try:
        import torch_xla  # noqa: F401
    except ImportError:
        return False
    return True


def mps_available() -> bool:
    return bool(getattr(torch.backends, "mps", None)) and torch.backends.mps.is_available()


def resolve_device(name: str = "auto") -> torch.device:
    """The torch device for a name; missing backends fall back to the CPU with a warning."""
    name = check_device_name(name)
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            log.warning("CUDA is not available on this machine; running on the CPU instead")
            return torch.device("cpu")
        index = int(name[5:]) if ":" in name else 0
        if index >= torch.cuda.device_count():
            log.warning("cuda:%d does not exist (%d GPUs); running on the CPU instead", index, torch.cuda.device_count())
            return torch.device("cpu")
        return torch.device("cuda", index)
    if name == "mps":
        if not mps_available():
            log.warning("MPS is not available on this machine; running on the CPU instead")
            return torch.device("cpu")
        return torch.device("mps")
    if not xla_available():
        log.warning("torch_xla is not installed; running on the CPU instead")
        return torch.device("cpu")
    import torch_xla.core.xla_model as xm

    return xm.xla_device()


def available_devices() -> list[dict]:
    """Every device name this machine can run, with a description; unavailable ones say why.

    >>> available_devices()[0]["device"]
    'cpu'
    """

    def entry(name: str, available: bool, reason: str | None = None, device: torch.device | None = None) -> dict:
        description = describe_device(device) if device is not None else None
        return {"device": name, "available": available, "reason": reason, "description": description}

    out = [entry("cpu", True, device=torch.device("cpu"))]
    if torch.cuda.is_available():
        out += [entry(f"cuda:{i}", True, device=torch.device("cuda", i)) for i in range(torch.cuda.device_count())]
    else:
        out.append(entry("cuda", False, "no CUDA GPU found by this PyTorch build"))
    has_mps = mps_available()
    out.append(entry("mps", has_mps, None if has_mps else "no Apple GPU (MPS) on this machine",
                     torch.device("mps") if has_mps else None))
    out.append(entry("xla", xla_available(), None if xla_available() else "torch_xla is not installed"))
    return out


def describe_device(device: torch.device) -> dict:
    """Torch version, device name, and memory (GPUs) or thread count (CPU)."""
    info: dict = {"torch": torch.__version__, "type": device.type}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(
            name=props.name,
            memory_mib=props.total_memory // 2**20,
            capability=f"{props.major}.{props.minor}",
            bf16=torch.cuda.is_bf16_supported(),
        )
    elif device.type == "mps":
        info.update(name="Apple GPU (MPS)", memory_mib=None)
    elif device.type == "cpu":
        info.update(
            name=cpu_name(),
            threads=torch.get_num_threads(),
            cores=os.cpu_count(),
            capability=torch.backends.cpu.get_cpu_capability(),
            features=cpu_speed_flags(),
            auto_precision=resolve_precision("auto", device),
        )
    else:
        info.update(name=str(device))
    return info


@cache
def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def resolve_precision(name: str, device: torch.device) -> Precision:
    """Pick the number format.

    ``auto``: bf16 on GPUs that support it, fp16 (with a gradient scaler) on older
    GPUs, and on the CPU bf16 where its units compute it, else fp32 (:func:`cpu_prefers_bf16`): a rule
    from the hardware, the same for every run on one machine.
    """
    name = check_precision_name(name)
    if name != "auto":
        return name  # type: ignore[return-value]
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if device.type in ("mps", "xla"):
        return "bf16"
    return "bf16" if cpu_prefers_bf16() else "fp32"


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):  # x86, ARM
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


#: The CPU flags that decide a training step's speed: vector width and fused multiply-add (x86 AVX2/FMA,
#: AVX-512, ARM NEON/SVE), and bf16 in hardware (AVX512-BF16, AMX; ARM bf16), without which bf16 is emulated.
SPEED_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
               "asimd", "sve", "bf16")


def cpu_speed_flags() -> list[str]:
    """The :data:`SPEED_FLAGS` this CPU has, in that order."""
    flags = cpu_flags()
    return [f for f in SPEED_FLAGS if f in flags]


def cpu_summary() -> str:
    """One line for the CPU's figures: its speed flags, whether bf16 is in hardware, what ``auto`` picks.

    e.g. ``avx2 fma; bf16 emulated (no AVX512-BF16 or AMX); precision auto = fp32``
    """
    flags = " ".join(cpu_speed_flags()) or "no AVX2/AVX-512/NEON flags found"
    bf16 = "bf16 in hardware" if cpu_has_bf16() else "bf16 emulated (no AVX512-BF16 or AMX)"
    return f"{flags}; {bf16}; precision auto = {resolve_precision('auto', torch.device('cpu'))}"


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bf16 in hardware (AVX512-BF16, AMX, or ARM's bf16 extension)."""
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16", "bf16"})


def cpu_prefers_bf16() -> bool:
    """Whether ``auto`` picks bf16 autocast on this CPU: when the CPU computes bf16 in hardware
    (:func:`cpu_has_bf16`), where it runs a training step about 3x as fast as fp32; otherwise fp32 (emulated
    bf16 is much slower).

    A rule from the CPU's flags, never a timing: every run on the same machine resolves ``auto`` the same way,
    however busy the machine is, so the runs of one group over seeds share their numerics.
    """
    return cpu_has_bf16()


def autocast(device: torch.device, precision: Precision) -> contextlib.AbstractContextManager:
    """Autocast context for bf16/fp16; a no-op for fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=DTYPES[precision])


def set_threads(threads: int | None) -> None:
    """CPU intra-op threads (None or 0 keeps PyTorch's default)."""
    if threads:
        torch.set_num_threads(threads)


#: mallopt(3) parameters (glibc's malloc.h) and what a training process sets them to: no allocation mapped on its
#: own (by default every one over 32 MiB is: a holmes step's logits, their gradient, its attention scores), and up
#: to 1 GiB of freed memory kept in the heap with 64 MiB more asked of the kernel at a time. Each step then reuses
#: the last step's pages instead of mapping fresh ones and faulting them in (about 480,000 page faults a holmes
#: batch-32 step on the CPU otherwise; BENCHMARKS.md "Training step").
MALLOC_SETTINGS = {"M_MMAP_MAX": (-4, 0), "M_TRIM_THRESHOLD": (-1, 2**30), "M_TOP_PAD": (-2, 64 * 2**20)}


def keep_freed_memory() -> bool:
    """Set :data:`MALLOC_SETTINGS` for this process: True where they took (Linux with glibc), False elsewhere
    (macOS, musl: nothing to do). Like PyTorch's own caching allocator on a GPU, the process keeps its peak."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return False
    mallopt = ctypes.CDLL(None).mallopt
    return all(mallopt(param, value) == 1 for param, value in MALLOC_SETTINGS.values())


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so a timer measures the work and not its launch."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def xla_step(device: torch.device) -> None:
    """On XLA, cut the lazy graph and run it: once per training step."""
    if device.type == "xla":
        import torch_xla.core.xla_model as xm

        xm.mark_step()


def empty_cache(device: torch.device) -> None:
    """Hand cached GPU memory back (between benchmark cells, after an out-of-memory error)."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
    elif device.type == "mps":
        torch.mps.empty_cache()


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak: CUDA's counter, or on Linux the process's peak resident set (VmHWM)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    elif device.type == "cpu" and sys.platform.startswith("linux"):
        try:
            Path("/proc/self/clear_refs").write_text("5")  # 5: reset the peak RSS to the current RSS
        except OSError as exc:  # some sandboxes forbid it: the peak then spans the whole process
            log.debug("cannot reset the peak RSS: %s", exc)


def peak_memory_mib(device: torch.device) -> float:
    """CUDA max allocated, or on the CPU the process's peak resident set size."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    if device.type == "mps":
        return torch.mps.driver_allocated_memory() / 2**20
    if sys.platform.startswith("linux"):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024  # bytes on macOS, KiB on Linux


def is_out_of_memory(exc: BaseException) -> bool:
    """An allocation that failed: CUDA's ``OutOfMemoryError``, the CPU allocator's refusal
    (``DefaultCPUAllocator: can't allocate memory``, e.g. under a memory limit) or Python's ``MemoryError``.

    >>> is_out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 9 bytes"))
    True
    >>> is_out_of_memory(RuntimeError("shape mismatch"))
    False
    """
    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)
