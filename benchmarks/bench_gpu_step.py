"""The GPU step where it is launch-bound: holmes batch 32, eager against CUDA graphs (the run option
``compile_mode: reduce-overhead``), side by side in one run, and where an eager step's time goes.

Each mode trains in a process of its own (compilation and graph memory do not carry over), on random tokens (a
step's cost does not depend on them): a few untimed steps (compilation and graph capture land there: reported as
``first_steps_s``), then ``rounds`` x ``steps`` timed steps, the median round counting. The profile runs the
eager step under ``torch.profiler``: the kernels' summed GPU time per step against the step's wall time says
whether the GPU or the host (Python, kernel launches) sets the pace.

    python -m benchmarks.bench_gpu_step [--device cuda] [--batch-size 32] [--precision bf16]
        [--modes eager,reduce-overhead] [--rounds 3] [--steps 20] [--no-profile]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import torch

from tinygpt import device as dev
from tinygpt.run_config import TrainConfig
from tinygpt.train import Trainer

from .bench_speedrun import in_own_process, timed_steps, warm_up
from .common import machine, median, random_tokens

UNTIMED_STEPS = 3  # CUDA graph trees record on the second call and replay from the third


def make_trainer(out: str, mode: str, preset: str, batch_size: int, precision: str, device: str) -> Trainer:
    options: dict = {"preset": preset, "batch_size": batch_size, "device": device, "precision": precision,
                     "sample_tokens": 0}
    if mode != "eager":
        options |= {"compile": True, "compile_mode": mode}
    config = TrainConfig.from_dict(options)
    tokens, tokenizer = random_tokens(config.model_config().vocab_size, 300_000)
    return Trainer(config, out, tokens=tokens, tokenizer=tokenizer)


def step_rate(mode: str, preset: str, batch_size: int, precision: str, device: str, rounds: int,
              steps: int) -> dict:
    """One mode's tokens/s: the median of ``rounds`` timed rounds of ``steps`` steps."""
    with tempfile.TemporaryDirectory() as out:
        trainer = make_trainer(out, mode, preset, batch_size, precision, device)
        first = warm_up(trainer, UNTIMED_STEPS)
        rate = median([timed_steps(trainer, steps) for _ in range(rounds)])
    per_step = batch_size * trainer.model_config.context
    return {"mode": mode, "tokens_per_sec": rate, "ms_per_step": 1e3 * per_step / rate, "first_steps_s": first}


def profile_eager(preset: str, batch_size: int, precision: str, device: str, steps: int = 10) -> dict:
    """The eager step under the profiler: wall and summed kernel time per step, and the top operators."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with tempfile.TemporaryDirectory() as out:
        trainer = make_trainer(out, "eager", preset, batch_size, precision, device)
        warm_up(trainer, UNTIMED_STEPS)
        with profile(activities=activities) as prof:
            t0 = time.perf_counter()
            for i in range(steps):
                trainer._train_step(i + UNTIMED_STEPS)
            dev.synchronize(trainer.device)
            wall = time.perf_counter() - t0
    events = prof.key_averages()
    kernels_us = sum(e.self_device_time_total for e in events  # the kernels themselves, as the table's total
                     if e.device_type == DeviceType.CUDA and not e.is_user_annotation)
    return {
        "profiled_wall_ms_per_step": 1e3 * wall / steps,
        "kernel_ms_per_step": kernels_us / 1e3 / steps,
        "kernel_launches_per_step": sum(e.count for e in events if e.key == "cudaLaunchKernel") / steps,
        "top_host_ops": events.table(sort_by="self_cpu_time_total", row_limit=12),
        "top_kernels": events.table(sort_by="self_cuda_time_total", row_limit=10) if len(activities) > 1 else "",
    }


def run(modes: list[str], preset: str = "holmes", batch_size: int = 32, precision: str = "bf16",
        device: str = "cuda", rounds: int = 3, steps: int = 20, profile: bool = True) -> dict:
    rates = [in_own_process(step_rate, m, preset, batch_size, precision, device, rounds, steps) for m in modes]
    result: dict = {"preset": preset, "batch_size": batch_size, "precision": precision, "device": device,
                    "rates": rates}
    if profile:
        result["profile"] = in_own_process(profile_eager, preset, batch_size, precision, device)
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--preset", default="holmes")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--modes", default="eager,reduce-overhead", help="eager and/or compile modes, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--no-profile", action="store_true")
    args = ap.parse_args()
    print(machine(), torch.cuda.get_device_name() if torch.cuda.is_available() else "", flush=True)
    result = run(args.modes.split(","), args.preset, args.batch_size, args.precision, args.device, args.rounds,
                 args.steps, not args.no_profile)
    profile = result.pop("profile", None)
    print(json.dumps(result, indent=2))
    if profile:
        print(profile.pop("top_host_ops"), profile.pop("top_kernels"), json.dumps(profile, indent=2), sep="\n")


if __name__ == "__main__":
    main()
