"""Training step throughput: the project's step (fp32, precision auto) vs a plain PyTorch loop.

The variants run round-robin (a few steps each, several rounds) in one process, so
they share the machine's conditions; the figure is each variant's median tokens/s.

    python -m benchmarks.bench_train [--preset holmes] [--batch-size 32] [--rounds 3] [--steps 3]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import torch

from tinygpt.presets import model_config
from tinygpt.run_config import TrainConfig
from tinygpt.tokenizer import Tokenizer
from tinygpt.train import Trainer

from .common import machine, median
from .plain_loop import make_plain_step


def project_step(precision: str, tokens: torch.Tensor, preset: str, batch: int, out_dir: str, compile: bool = False):
    cfg = TrainConfig(preset=preset, device="cpu", precision=precision, batch_size=batch, steps=10_000,
                      sample_tokens=0, compile=compile)
    trainer = Trainer(cfg, out_dir, tokens=tokens, tokenizer=Tokenizer([]))
    counter = iter(range(10**9))

    def step() -> float:
        return float(trainer._train_step(next(counter)))

    return step, trainer.precision


def run(preset: str = "holmes", batch: int = 32, rounds: int = 3, steps: int = 3, warmup: int = 2) -> dict:
    cfg = model_config(preset)
    tokens = torch.randint(cfg.vocab_size, (200_000,), generator=torch.Generator().manual_seed(0))
    tokens_per_step = batch * cfg.context
    with tempfile.TemporaryDirectory() as tmp:
        auto_step, auto_precision = project_step("auto", tokens, preset, batch, f"{tmp}/auto")
        variants = {
            "plain_fp32": make_plain_step(tokens, batch, cfg.context) if preset == "holmes" else None,
            "project_fp32": project_step("fp32", tokens, preset, batch, f"{tmp}/fp32")[0],
            f"project_auto({auto_precision})": auto_step,
            "project_fp32_compiled": project_step("fp32", tokens, preset, batch, f"{tmp}/compiled", compile=True)[0],
        }
        variants = {k: v for k, v in variants.items() if v is not None}
        first_step_s = {}
        for name, fn in variants.items():
            t0 = time.perf_counter()
            fn()
            first_step_s[name] = time.perf_counter() - t0  # torch.compile's compilation lands here
            for _ in range(warmup - 1):
                fn()
        rates: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(rounds):
            for name, fn in variants.items():
                t0 = time.perf_counter()
                for _ in range(steps):
                    fn()
                rates[name].append(steps * tokens_per_step / (time.perf_counter() - t0))
    result = {name: median(r) for name, r in rates.items()}
    base = result.get("plain_fp32", result["project_fp32"])
    return {
        "preset": preset,
        "batch_size": batch,
        "tokens_per_sec": result,
        "ratio_vs_plain": {name: v / base for name, v in result.items()},
        "auto_precision": auto_precision,
        "first_step_s": first_step_s,
        "compile_break_even_steps": break_even(first_step_s["project_fp32_compiled"], tokens_per_step,
                                               result["project_fp32"], result["project_fp32_compiled"]),
        "profile": profile_step(preset, batch),
    }


def break_even(compile_s: float, tokens_per_step: int, eager_tps: float, compiled_tps: float) -> float:
    """Steps after which the time saved per step has paid for the compilation (inf if none is saved)."""
    saved = tokens_per_step / eager_tps - tokens_per_step / compiled_tps
    return compile_s / saved if saved > 0 else float("inf")


CATEGORIES = {  # profiler op name -> where the time goes
    "matrix products": ("aten::mm", "aten::addmm", "aten::bmm"),
    "dropout masks (random numbers)": ("aten::bernoulli_",),
    "cross-entropy over the logits": ("aten::_log_softmax", "aten::_log_softmax_backward_data", "aten::nll_loss"),
    "attention softmax and masking": ("aten::_softmax", "aten::_softmax_backward_data", "aten::where",
                                      "aten::isneginf", "aten::all", "aten::_safe_softmax"),
    "GELU": ("aten::gelu", "aten::gelu_backward"),
}


def profile_step(preset: str, batch: int) -> dict:
    """Share of one fp32 training step's CPU time per kind of work (torch.profiler, self time)."""
    from torch.profiler import profile

    cfg = model_config(preset)
    tokens = torch.randint(cfg.vocab_size, (200_000,), generator=torch.Generator().manual_seed(0))
    with tempfile.TemporaryDirectory() as tmp:
        step, _ = project_step("fp32", tokens, preset, batch, tmp)
        step()
        with profile() as prof:
            step()
    times = {e.key: e.self_cpu_time_total for e in prof.key_averages()}
    total = sum(times.values())
    shares = {name: sum(times.get(op, 0) for op in ops) / total for name, ops in CATEGORIES.items()}
    shares["everything else"] = 1 - sum(shares.values())
    return shares


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="holmes")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    print(machine())
    print(json.dumps(run(args.preset, args.batch_size, args.rounds, args.steps), indent=2))


if __name__ == "__main__":
    main()
