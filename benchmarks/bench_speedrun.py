"""Time to target: the fast recipe (tinygpt/recipes.py) against the series' on holmes validation loss 3.76, at each
precision in turn: ``auto`` (what a user gets: bf16 on a CPU or GPU that computes it) and ``fp32``.

The fast side is trained for real, once per seed in a process of its own, until the whole validation split's
loss reaches the target (the trainer's own check, tinygpt.train.TARGET_MARGIN); the slowest seed counts. On a CPU
the series side is its recorded tokens to target (SERIES_RECORDS: its fp32 run, or its bf16 run where ``auto``
means bf16; interpolated between the two evaluations around the target, which is in the series' favour) divided
by the series step's tokens/s, measured here at the same precision in the same run: both recipes' steps
alternate a few rounds before the fast runs start. Time is training time as the dashboard shows it
(``elapsed_sec``: evaluation, samples and checkpoints excluded). On a GPU (``--device cuda``,
scripts/gpu_check.sh) both recipes are trained to the target for real, the fast recipe as it is on that device
(on CUDA its variant: the series' options with CUDA graphs); ``--compile-mode reduce-overhead`` compiles both,
the compilation counted in the training time as the dashboard counts it.

    python -m benchmarks.bench_speedrun [--seeds 1337,1,2] [--rounds 3] [--steps 5] [--device cuda]
                                        [--compile-mode reduce-overhead] [--precisions auto,fp32]
    python -m benchmarks.bench_speedrun --where [--precisions auto,fp32]   (where each recipe's CPU step goes)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from tinygpt import device as dev
from tinygpt.corpus import known_target
from tinygpt.recipes import RECIPES
from tinygpt.records import Callbacks, StepMetrics, TargetReached, read_metrics_csv
from tinygpt.run_config import COMPILE_MODES, TrainConfig
from tinygpt.train import Trainer

from .bench_train import CATEGORIES
from .common import ROOT, holmes_path, machine, median, random_tokens

SERIES_CSV = ROOT / "docs" / "runs" / "cpu-holmes-1500-fp32.csv"
#: The series' recorded runs by the precision they trained in (the same seed and batches): a CPU's fp32 run, an
#: H200's bf16 autocast (9.39M tokens to 3.76 against fp32's 9.38M: bf16 costs the series no sample efficiency)
SERIES_RECORDS = {"fp32": SERIES_CSV, "bf16": ROOT / "docs" / "runs" / "h200-holmes-1500-bf16.csv"}
#: What the benchmark measures on a CPU: what a user gets (the device's default precision), then the plain fp32 loop
PRECISIONS = ("auto", "fp32")


def tokens_to_target(rows: list[StepMetrics], target: float) -> float:
    """Tokens seen when the validation loss first crosses ``target``, linear between the evaluations around it.

    >>> rows = [StepMetrics(s, 0, v, 0, 0, 0, s * 10, 0, 0) for s, v in [(0, 5.0), (10, 4.0), (20, 3.0)]]
    >>> tokens_to_target(rows, 3.5)
    150.0
    """
    evals = [(r.tokens_seen, r.val_loss) for r in rows if r.val_loss is not None]
    for (t0, v0), (t1, v1) in zip(evals, evals[1:], strict=False):
        if v1 <= target < v0:
            return t0 + (t1 - t0) * (v0 - target) / (v0 - v1)
    raise ValueError(f"the validation loss never crosses {target}")


def on_device(device: str, compile_mode: str | None = None, precision: str = "auto") -> dict:
    """The options every run here takes: the device, the precision, no samples; with ``compile_mode``, compiled in
    that mode.

    >>> on_device("cuda", "reduce-overhead")["compile_mode"], on_device("cpu", precision="fp32")["precision"]
    ('reduce-overhead', 'fp32')
    """
    compiled = {"compile": True, "compile_mode": compile_mode} if compile_mode else {}
    return {"device": device, "precision": precision, "sample_tokens": 0, **compiled}


def resolved_precision(device: str, precision: str) -> str:
    """What ``precision`` means on ``device`` (``auto``: bf16 where the device computes it, else fp32).

    >>> resolved_precision("cpu", "fp32")
    'fp32'
    """
    return dev.resolve_precision(precision, dev.resolve_device(device))


def step_rates(recipes: list[str], rounds: int, steps: int, device: str, compile_mode: str | None = None,
               precision: str = "auto") -> dict[str, float]:
    """Median tokens/s of each recipe's training step, the recipes alternating ``rounds`` times (random tokens:
    a step's cost does not depend on them)."""
    configs = {r: TrainConfig.from_dict({"recipe": r, **on_device(device, compile_mode, precision)}) for r in recipes}
    data = {r: random_tokens(c.model_config().vocab_size, 300_000) for r, c in configs.items()}
    rates: dict[str, list[float]] = {r: [] for r in recipes}
    with tempfile.TemporaryDirectory() as tmp:
        trainers = {r: Trainer(c, f"{tmp}/{r}", tokens=data[r][0], tokenizer=data[r][1]) for r, c in configs.items()}
        for trainer in trainers.values():
            warm_up(trainer, 3 if trainer.config.compile else 1)  # CUDA graph trees replay from the third call
        for _ in range(rounds):
            for name, trainer in trainers.items():
                rates[name].append(timed_steps(trainer, steps))
    return {name: median(r) for name, r in rates.items()}


def warm_up(trainer: Trainer, steps: int) -> float:
    """The untimed first ``steps`` steps (allocation, compilation and graph capture land there); their seconds."""
    t0 = time.perf_counter()
    for i in range(steps):
        trainer._train_step(i)
    dev.synchronize(trainer.device)
    return time.perf_counter() - t0


def timed_steps(trainer: Trainer, steps: int) -> float:
    per_step = trainer.config.batch_size * trainer.model_config.context
    dev.synchronize(trainer.device)
    t0 = time.perf_counter()
    for i in range(steps):
        trainer._train_step(i + 1)
    dev.synchronize(trainer.device)
    return steps * per_step / (time.perf_counter() - t0)


#: Where a recipe's step goes besides bench_train's kinds of work: the optimizer (every op under its step) and the
#: fused attention kernel (the recipes' attention without dropout on its probabilities)
STEP_PARTS = {"attention (fused kernel)": ("aten::_scaled_dot_product_flash_attention_for_cpu",
                                           "aten::_scaled_dot_product_flash_attention_for_cpu_backward"),
              **CATEGORIES}
OPTIMIZER_PART = "the optimizer step (Muon's Newton-Schulz, AdamW)"


def where_the_time_goes(recipe: str, precision: str, steps: int = 3) -> dict:
    """A recipe's training step on the CPU at ``precision``, profiled (torch.profiler, each op's self time over
    ``steps`` steps after one untimed): ms a step, and its share per part (:data:`STEP_PARTS`; everything under the
    optimizer's step counted as the optimizer's)."""
    from torch.profiler import profile

    config = TrainConfig.from_dict({"recipe": recipe, **on_device("cpu", None, precision)})
    tokens, tokenizer = random_tokens(config.model_config().vocab_size, 300_000)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(config, tmp, tokens=tokens, tokenizer=tokenizer)
        warm_up(trainer, 1)
        with profile() as prof:
            for i in range(steps):
                trainer._train_step(i + 1)
    parts = dict.fromkeys([OPTIMIZER_PART, *STEP_PARTS, "everything else"], 0.0)
    for event in prof.events():
        parts[step_part(event)] += event.self_cpu_time_total / 1e3 / steps
    total = sum(parts.values())
    return {"recipe": recipe, "precision": precision, "ms_per_step": total,
            "shares": {name: ms / total for name, ms in parts.items()}}


def step_part(event: object) -> str:
    """The part of the step a profiled op belongs to: the optimizer's if any caller is its step, else its kind."""
    caller = event
    while caller is not None:
        if caller.name.startswith("Optimizer.step#"):
            return OPTIMIZER_PART
        caller = caller.cpu_parent
    return next((name for name, ops in STEP_PARTS.items() if event.name in ops), "everything else")


class StopAtTarget(Callbacks):
    """Ends the run at the evaluation that first reaches the target (later steps would not change when it was
    reached), judged by the one rule every layer uses (:class:`tinygpt.records.TargetReached`)."""

    def __init__(self, target: float) -> None:
        self.target, self.rows, self.reached = target, [], None

    def on_eval(self, metrics: StepMetrics) -> None:
        self.rows.append(metrics)
        self.reached = self.reached or TargetReached.first(self.rows, self.target)
        print(f"  step {metrics.step}: val {metrics.val_loss:.4f}" + (
            f" (whole split {metrics.val_loss_full:.4f})" if metrics.val_loss_full is not None else "") +
            f", {metrics.tokens_seen:,} tokens, {metrics.elapsed_sec:.0f} s", flush=True)

    def should_stop(self) -> bool:
        return self.reached is not None


def train_to_target(recipe: str, seed: int, target: float, corpus: Path, cache_dir: Path, device: str,
                    compile_mode: str | None = None, precision: str = "auto", **options: object) -> dict:
    config = TrainConfig.from_dict({"recipe": recipe, "seed": seed, "corpus": str(corpus),
                                    **on_device(device, compile_mode, precision), **options})
    stop = StopAtTarget(target)
    with tempfile.TemporaryDirectory() as out:
        result = Trainer(config, out, callbacks=stop, cache_dir=cache_dir).run()
    row = stop.reached
    return {"seed": seed, "steps": config.steps, "reached": row is not None, "best_val_loss": result.best_val_loss,
            "step": row and row.step, "tokens": row and row.tokens_seen, "train_sec": row and row.elapsed_sec,
            "val_loss_full": row and row.val_loss}


def in_own_process(fn: Callable[..., dict], *args: object, **kwargs: object) -> dict:
    """``fn(*args, **kwargs)`` in a fresh process, as the worker runs each job: each training starts from a process's
    own memory and threads, not from what the step rates or the previous seed left in this one."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args, **kwargs).result()


def at_precision(precision: str, seeds: tuple[int, ...], rounds: int, steps: int, device: str,
                 compile_mode: str | None, corpus: Path, target: float, cache: Path) -> dict:
    """Both recipes at one precision: the steps side by side, the fast recipe trained to the target per seed, the
    series trained to it too on an accelerator or, on a CPU, its recorded tokens at its step's rate measured here."""
    rates = step_rates(["series", "fast"], rounds, steps, device, compile_mode, precision)
    resolved = resolved_precision(device, precision)
    if device == "cpu":  # hours of this CPU: the series' recorded run, at the step's speed measured here
        series_run, record = None, SERIES_RECORDS[resolved]
        series_tokens = tokens_to_target(read_metrics_csv(record), target)
        series_sec = series_tokens / rates["series"]
    else:  # evaluated as often as the fast recipe, so that both are timed as finely
        series_run, record = in_own_process(train_to_target, "series", seeds[0], target, corpus, cache, device,
                                            compile_mode, precision, eval_every=40), None
        series_tokens, series_sec = series_run["tokens"], series_run["train_sec"]
    runs = [in_own_process(train_to_target, "fast", seed, target, corpus, cache, device, compile_mode, precision)
            for seed in seeds]
    slowest = max((r["train_sec"] for r in runs), default=None) if all(r["reached"] for r in runs) else None
    return {
        "precision": precision, "resolved_precision": resolved,
        "series_record": record and str(record.relative_to(ROOT)), "series_tokens_to_target": series_tokens,
        "series_tokens_per_sec": rates["series"], "fast_step_tokens_per_sec": rates["fast"],
        "series_sec_to_target": series_sec, "series_run": series_run, "fast_runs": runs, "fast_slowest_sec": slowest,
        "fast_over_series": slowest / series_sec if slowest and series_sec else None,
    }


def run(seeds: tuple[int, ...] = (1337, 1, 2), rounds: int = 3, steps: int = 5, device: str = "cpu",
        compile_mode: str | None = None, precisions: tuple[str, ...] = PRECISIONS) -> dict:
    """Each precision in ``precisions`` in turn (on a CPU: ``auto``, what a user gets, then fp32)."""
    corpus = holmes_path()
    target = known_target(corpus.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as cache:
        by_precision = [at_precision(p, seeds, rounds, steps, device, compile_mode, corpus, target, Path(cache))
                        for p in precisions]
    return {"target": target, "device": device, "compile_mode": compile_mode, "threads": torch.get_num_threads(),
            "fast_options": RECIPES["fast"].options, "precisions": by_precision}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="1337,1,2", help="the fast recipe's seeds, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--compile-mode", choices=COMPILE_MODES, help="compile both recipes in this mode (default: eager)")
    ap.add_argument("--precisions", default=",".join(PRECISIONS), help="comma-separated, measured in turn")
    ap.add_argument("--where", action="store_true", help="only profile both recipes' steps at each precision (CPU)")
    args = ap.parse_args()
    print(machine())
    if args.where:
        print(json.dumps([where_the_time_goes(r, p) for p in args.precisions.split(",") for r in ("series", "fast")],
                         indent=2))
        return
    seeds = tuple(int(s) for s in args.seeds.split(","))
    print(json.dumps(run(seeds, args.rounds, args.steps, args.device, args.compile_mode,
                     tuple(args.precisions.split(","))), indent=2))


if __name__ == "__main__":
    main()
