"""Several processes training one model: PyTorch's DistributedDataParallel, launched by torchrun.

torchrun (``python -m torch.distributed.run``) starts one process per GPU and tells each its
``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``; :func:`tinygpt.ranks.dist_info` reads them. Every rank draws the
same global batch (the batch generator has the same seed everywhere) and trains on its slice,
so N ranks with a global batch of B follow the curve of one process with batch B. Rank 0
reports metrics, evaluates, samples and saves checkpoints; the others only train.

    python -m torch.distributed.run --standalone --nproc_per_node 2 -m tinygpt train --preset tiny ...
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as torch_dist

from .ranks import DistInfo


def rank_device(name: str, info: DistInfo) -> str:
    """The device a rank trains on: ``cuda:LOCAL_RANK`` for a CUDA run, else the run's device."""
    if info.enabled and name in ("cuda", "auto") and torch.cuda.is_available():
        return f"cuda:{info.local_rank}"
    return name


def start(info: DistInfo, device: torch.device) -> None:
    """Join the process group (NCCL between GPUs, gloo on the CPU) once per process."""
    if info.enabled and not torch_dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        torch_dist.init_process_group("nccl" if device.type == "cuda" else "gloo")


def wait_for_all(info: DistInfo) -> None:
    """Return on every rank once all have arrived: ranks leave training together, so none tears
    its process group down while rank 0 still evaluates and saves over it."""
    if info.enabled and torch_dist.is_initialized():
        torch_dist.barrier()


def stop() -> None:
    if torch_dist.is_initialized():
        torch_dist.destroy_process_group()


def any_rank(flag: bool, info: DistInfo, device: torch.device) -> bool:
    """True on every rank when it is true on any (a stop request seen by rank 0 stops all)."""
    if not info.enabled:
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    torch_dist.all_reduce(t, op=torch_dist.ReduceOp.MAX)
    return bool(t.item())


def mean_over_ranks(value: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if not info.enabled:
        return value
    value = value.clone()
    torch_dist.all_reduce(value, op=torch_dist.ReduceOp.SUM)
    return value / info.world_size


def shard(batch: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """This rank's rows of a global batch: (B, T) -> (B / world_size, T)."""
    if not info.enabled:
        return batch
    rows = batch.shape[0] // info.world_size
    return batch[info.rank * rows : (info.rank + 1) * rows]


def torchrun_command(processes: int, module: str, *args: str) -> list[str]:
    """The command that runs ``python -m module args`` as ``processes`` ranks on this machine."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
            "-m", module, *args]
