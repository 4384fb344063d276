"""Training step throughput: the project's step (fp32, precision auto) vs a plain PyTorch loop.

Each variant runs in a process of its own; they take turns (a few steps each, several rounds), so
they share the machine's conditions; the figure is each variant's median tokens/s.

    python -m benchmarks.bench_train [--preset holmes] [--batch-size 32] [--rounds 6] [--steps 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time

from tinygpt.presets import model_config
from tinygpt.run_config import TrainConfig
from tinygpt.train import Trainer

from .common import ROOT, machine, median, random_tokens
from .plain_loop import make_plain_step


def project_step(precision: str, preset: str, batch: int, out_dir: str, compile: bool = False):
    cfg = TrainConfig(preset=preset, device="cpu", precision=precision, batch_size=batch, steps=10_000,
                      sample_tokens=0, compile=compile)
    tokens, tokenizer = random_tokens(cfg.model_config().vocab_size, 200_000)
    trainer = Trainer(cfg, out_dir, tokens=tokens, tokenizer=tokenizer)
    counter = iter(range(10**9))

    def step() -> float:
        return float(trainer._train_step(next(counter)))

    return step, trainer.precision


def variant_step(name: str, preset: str, batch: int, out_dir: str) -> tuple[object, str]:
    """One variant's step closure and its precision (``plain_fp32``, ``project_fp32``, ``project_auto``,
    ``project_fp32_compiled``)."""
    if name == "plain_fp32":
        cfg = model_config(preset)
        return make_plain_step(random_tokens(cfg.vocab_size, 200_000)[0], batch, cfg.context), "fp32"
    precision = "auto" if name == "project_auto" else "fp32"
    return project_step(precision, preset, batch, out_dir, compile=name.endswith("compiled"))


def serve_variant(name: str, preset: str, batch: int, steps: int, warmup: int) -> None:
    """A variant's own process: build its step, take ``warmup`` steps and print the first one's seconds and the
    precision, then per line ``go`` on stdin time ``steps`` steps and print the tokens/s."""
    with tempfile.TemporaryDirectory() as tmp:
        step, precision = variant_step(name, preset, batch, tmp)
        t0 = time.perf_counter()
        step()
        first = time.perf_counter() - t0  # torch.compile's compilation lands here
        for _ in range(warmup - 1):
            step()
        print(json.dumps({"first_step_s": first, "precision": precision}), flush=True)
        tokens_per_step = batch * model_config(preset).context
        for _line in sys.stdin:
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            print(steps * tokens_per_step / (time.perf_counter() - t0), flush=True)


def run(preset: str = "holmes", batch: int = 32, rounds: int = 6, steps: int = 3, warmup: int = 2) -> dict:
    """Each variant in a process of its own, as a user's run is (so that a process-wide setting such as the
    project's allocator, ``tinygpt.device.keep_freed_memory``, stays with its variant); the processes take turns,
    ``steps`` steps each, for ``rounds`` rounds, so they share the machine's conditions."""
    names = (["plain_fp32"] if preset == "holmes" else []) + ["project_fp32", "project_auto", "project_fp32_compiled"]
    procs, first_step_s, precisions = {}, {}, {}
    try:
        for name in names:  # started and warmed up one at a time: the compilation has the CPU to itself
            procs[name] = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.bench_train", "--variant", name, "--preset", preset,
                 "--batch-size", str(batch), "--steps", str(steps), "--warmup", str(warmup)],
                cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            ready = json.loads(procs[name].stdout.readline())
            first_step_s[name], precisions[name] = ready["first_step_s"], ready["precision"]
        rates: dict[str, list[float]] = {name: [] for name in names}
        for _ in range(rounds):
            for name, proc in procs.items():
                proc.stdin.write("go\n")
                proc.stdin.flush()
                rates[name].append(float(proc.stdout.readline()))
    finally:
        for proc in procs.values():
            proc.stdin.close()
            proc.wait()
    auto_precision = precisions["project_auto"]
    result = {(f"project_auto({auto_precision})" if name == "project_auto" else name): median(r)
              for name, r in rates.items()}
    base = result.get("plain_fp32", result["project_fp32"])
    tokens_per_step = batch * model_config(preset).context
    return {
        "preset": preset,
        "batch_size": batch,
        "tokens_per_sec": result,
        "ratio_vs_plain": {name: v / base for name, v in result.items()},
        "auto_precision": auto_precision,
        "first_step_s": first_step_s,
        "compile_break_even_steps": break_even(first_step_s["project_fp32_compiled"], tokens_per_step,
                                               result["project_fp32"], result["project_fp32_compiled"]),
        "profile": profile_step(preset, batch, auto_precision),
        "profile_precision": auto_precision,
    }


def break_even(compile_s: float, tokens_per_step: int, eager_tps: float, compiled_tps: float) -> float:
    """Steps after which the time saved per step has paid for the compilation (inf if none is saved)."""
    saved = tokens_per_step / eager_tps - tokens_per_step / compiled_tps
    return compile_s / saved if saved > 0 else float("inf")


CATEGORIES = {  # profiler op name -> where the time goes
    "matrix products": ("aten::mm", "aten::addmm", "aten::bmm"),
    "dropout masks (random numbers)": ("aten::bernoulli_", "aten::random_", "aten::ge"),  # tinygpt/dropout.py
    "cross-entropy over the logits": ("aten::_log_softmax", "aten::_log_softmax_backward_data", "aten::nll_loss"),
    "attention softmax and masking": ("aten::_softmax", "aten::_softmax_backward_data", "aten::where",
                                      "aten::isneginf", "aten::all", "aten::_safe_softmax",
                                      "aten::masked_fill_"),
    "GELU": ("aten::gelu", "aten::gelu_backward"),
}


def profile_step(preset: str, batch: int, precision: str = "fp32") -> dict:
    """Share of one training step's CPU time per kind of work (torch.profiler, self time), at ``precision`` (the
    series' step on this CPU: what precision auto resolved to)."""
    from torch.profiler import profile

    with tempfile.TemporaryDirectory() as tmp:
        step, _ = project_step(precision, preset, batch, tmp)
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
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--variant", help=argparse.SUPPRESS)  # a variant's own process (run's)
    args = ap.parse_args()
    if args.variant:
        serve_variant(args.variant, args.preset, args.batch_size, args.steps, args.warmup)
        return
    print(machine())
    print(json.dumps(run(args.preset, args.batch_size, args.rounds, args.steps, args.warmup), indent=2))


if __name__ == "__main__":
    main()
