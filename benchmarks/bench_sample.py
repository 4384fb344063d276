"""Sampling: KV cache vs full recompute, 256 new tokens on the CPU (holmes preset, fp32).

    python -m benchmarks.bench_sample [--preset holmes] [--new-tokens 256]
"""

from __future__ import annotations

import argparse
import json

import torch

from tinygpt.model import GPT
from tinygpt.presets import model_config
from tinygpt.sample import generate

from .common import best_time, machine


def run(preset: str = "holmes", new_tokens: int = 256, repeat: int = 3) -> dict:
    torch.manual_seed(0)
    model = GPT(model_config(preset)).eval()
    prompt = [42]

    def sample(use_cache: bool) -> list[int]:
        return list(generate(model, prompt, new_tokens, temperature=0.8, seed=1, use_cache=use_cache))

    assert sample(True) == sample(False), "cached and recomputed tokens differ"
    cached = best_time(lambda: sample(True), repeat)
    recompute = best_time(lambda: sample(False), repeat)
    return {
        "preset": preset,
        "new_tokens": new_tokens,
        "cached_tokens_per_sec": new_tokens / cached,
        "recompute_tokens_per_sec": new_tokens / recompute,
        "speedup": recompute / cached,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="holmes")
    ap.add_argument("--new-tokens", type=int, default=256)
    args = ap.parse_args()
    print(machine())
    print(json.dumps(run(args.preset, args.new_tokens), indent=2))


if __name__ == "__main__":
    main()
