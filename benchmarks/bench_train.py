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
from tinygpt.tokenizer import Tokenizer
from tinygpt.train import TrainConfig, Trainer

from .common import machine, median
from .plain_loop import make_plain_step


def project_step(precision: str, tokens: torch.Tensor, preset: str, batch: int, out_dir: str):
    cfg = TrainConfig(preset=preset, device="cpu", precision=precision, batch_size=batch, steps=10_000,
                      sample_tokens=0)
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
        }
        variants = {k: v for k, v in variants.items() if v is not None}
        for fn in variants.values():
            for _ in range(warmup):
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
    }


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
