"""Sampling: KV cache vs full recompute, 256 new tokens on the CPU (holmes preset, fp32).

    python -m benchmarks.bench_sample [--preset holmes] [--new-tokens 256] [--rounds 9]

The two paths run in alternating rounds. Each token's time is taken separately, and each
path's time is the sum over positions of that position's fastest round: a burst of load from
another tenant slows a few tokens of one round, not the estimate (a whole round's best time
is reported too, for comparison).
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from tinygpt.model import GPT
from tinygpt.presets import model_config
from tinygpt.sample import generate

from .common import machine


def token_times(model: GPT, prompt: list[int], new_tokens: int, use_cache: bool) -> tuple[list[int], list[float]]:
    """The sampled tokens and the seconds each one took (the first includes the prompt)."""
    tokens, times = [], []
    t0 = time.perf_counter()
    for token in generate(model, prompt, new_tokens, temperature=0.8, seed=1, use_cache=use_cache):
        now = time.perf_counter()
        tokens.append(token)
        times.append(now - t0)
        t0 = now
    return tokens, times


def run(preset: str = "holmes", new_tokens: int = 256, rounds: int = 9) -> dict:
    torch.manual_seed(0)
    model = GPT(model_config(preset)).eval()
    prompt = [42]
    per_token: dict[str, list[float]] = {"cached": [float("inf")] * new_tokens, "recompute": [float("inf")] * new_tokens}
    best_round = {"cached": float("inf"), "recompute": float("inf")}
    tokens = {}
    for _ in range(rounds):
        for name in per_token:
            tokens[name], times = token_times(model, prompt, new_tokens, use_cache=name == "cached")
            per_token[name] = [min(a, b) for a, b in zip(per_token[name], times, strict=True)]
            best_round[name] = min(best_round[name], sum(times))
    assert tokens["cached"] == tokens["recompute"], "cached and recomputed tokens differ"
    cached, recompute = sum(per_token["cached"]), sum(per_token["recompute"])
    return {
        "preset": preset,
        "new_tokens": new_tokens,
        "rounds": rounds,
        "cached_tokens_per_sec": new_tokens / cached,
        "recompute_tokens_per_sec": new_tokens / recompute,
        "speedup": recompute / cached,
        "speedup_of_best_rounds": best_round["recompute"] / best_round["cached"],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="holmes")
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    print(machine())
    print(json.dumps(run(args.preset, args.new_tokens, args.rounds), indent=2))


if __name__ == "__main__":
    main()
