"""Sweeps: the same 16-trial random sweep of the tiny preset on Holmes, with Hyperband pruning (W&B's
meaning: asynchronous successive halving, Optuna's SuccessiveHalvingPruner) and without (same sampler seed, so the same 16 option sets, on 2 workers), side by side in one home.

Measured: training tokens spent, the best validation loss found, wall time, and the sweep page's
live latency (a trial's evaluation written by its job -> received on the sweep's event stream).

    python -m benchmarks.bench_sweep [--steps 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from .common import ROOT, holmes_path

sys.path.insert(0, str(ROOT))
from tests.service_helpers import AppServer, Home, Worker, wait_for  # noqa: E402

PARAMETERS = {
    "lr": {"min": 1e-4, "max": 1e-2, "distribution": "log_uniform_values"},
    "dropout": {"min": 0.0, "max": 0.3},
    "batch_size": {"values": [8, 16, 32]},
}


EARLY_TERMINATE = {"type": "hyperband", "min_iter": 1, "eta": 3}  # rungs at 1, 3 and 9 of 10 evaluations


def sweep_config(steps: int, pruned: bool) -> dict:
    config = {"method": "random", "run_cap": 16, "parallel": 2, "seed": 0, "parameters": PARAMETERS,
              "name": "pruned" if pruned else "unpruned",
              "base": {"preset": "tiny", "dataset": "holmes", "device": "cpu", "precision": "fp32", "threads": 1,
                       "steps": steps, "eval_every": steps // 10, "eval_batches": 10, "sample_tokens": 0}}
    if pruned:
        config["early_terminate"] = EARLY_TERMINATE
    return config


def listen(url: str, latencies: list[float], stop: threading.Event) -> None:
    """The sweep's stream as the page reads it: how long each evaluation took to arrive."""
    with httpx.stream("GET", url, timeout=None) as response:
        for line in response.iter_lines():
            if line.startswith("data:"):
                data = json.loads(line[5:])
                if data.get("kind") in ("evaluated", "pruned") and "at" in data:
                    latencies.append(time.time() - data["at"])
            if stop.is_set() or line.startswith("event: end"):
                return


def one_sweep(app: AppServer, steps: int, pruned: bool) -> dict:
    with app.client() as c:
        t0 = time.perf_counter()
        sweep = c.post("/api/sweeps", json=sweep_config(steps, pruned))
        sweep.raise_for_status()
        sweep_id = sweep.json()["id"]
        latencies: list[float] = []
        stop = threading.Event()
        listener = threading.Thread(target=listen, args=(f"{app.url}/api/sweeps/{sweep_id}/events", latencies, stop))
        listener.start()
        wait_for(lambda: c.get(f"/api/sweeps/{sweep_id}").json()["status"] == "finished", timeout=7200,
                 interval=2, message="the sweep")
        wall = time.perf_counter() - t0
        stop.set()
        listener.join(timeout=30)
        detail = c.get(f"/api/sweeps/{sweep_id}").json()
        tokens = 0
        train_sec = 0.0
        for t in detail["trials"]:
            metrics = c.get(f"/api/runs/{t['run_id']}/metrics").json()
            tokens += metrics[-1]["tokens_seen"]
            train_sec += metrics[-1]["elapsed_sec"]
    return {"tokens": tokens, "best_val_loss": detail["best"]["objective"], "wall_s": round(wall, 1),
            "train_s": round(train_sec, 1), "counts": detail["counts"],
            "latency_p50_ms": round(statistics.median(latencies) * 1000, 1),
            "latency_p95_ms": round(statistics.quantiles(latencies, n=20)[-1] * 1000, 1),
            "evaluations_seen": len(latencies)}


@contextmanager
def site(tmp: str, name: str, warm: bool) -> Iterator[AppServer]:
    """An app and two workers on a home of their own, the tokenizer and encoded corpus made once."""
    home = Home(Path(tmp) / name, holmes_path(), {"TINYGPT_WARM_JOBS": "true" if warm else "false"})
    home.path.mkdir()
    app = AppServer(home)
    workers = [Worker(home, f"{name}-1"), Worker(home, f"{name}-2")]
    try:
        with app.client() as c:
            run_id = c.post("/api/runs", json=ONE_STEP).json()[0]["id"]
            wait_for(lambda: c.get(f"/api/runs/{run_id}").json()["status"] == "succeeded", timeout=900,
                     interval=1, message="warm-up run")
        yield app
    finally:
        for w in workers:
            w.stop()
        app.stop()


ONE_STEP = {"preset": "tiny", "device": "cpu", "precision": "fp32", "steps": 1, "eval_every": 1, "eval_batches": 1,
            "sample_tokens": 0, "threads": 1}


def start_up(app: AppServer) -> float:
    """Submission of a 1-step run -> its job starting to train (its device resolved: ``params`` set)."""
    with app.client() as c:
        t0 = time.perf_counter()
        run_id = c.post("/api/runs", json=ONE_STEP).json()[0]["id"]
        while c.get(f"/api/runs/{run_id}").json()["params"] is None:
            time.sleep(0.02)
        seconds = time.perf_counter() - t0
        wait_for(lambda: c.get(f"/api/runs/{run_id}").json()["status"] == "succeeded", timeout=120, interval=0.2,
                 message="the 1-step run")
    return seconds


def run(steps: int = 200, rounds: int = 5) -> dict:
    with tempfile.TemporaryDirectory() as tmp, site(tmp, "warm", True) as warm, site(tmp, "cold", False) as cold:
        times: dict[str, list[float]] = {"warm": [], "cold": []}
        for _ in range(rounds):  # alternating, so a noisy minute hits both
            times["cold"].append(start_up(cold))
            times["warm"].append(start_up(warm))
        startup = {k: {"median_s": round(statistics.median(v), 2), "max_s": round(max(v), 2), "all_s": v}
                   for k, v in times.items()}
        print(json.dumps(startup), file=sys.stderr, flush=True)
        unpruned = one_sweep(warm, steps, pruned=False)
        print(json.dumps(unpruned), file=sys.stderr, flush=True)
        pruned = one_sweep(warm, steps, pruned=True)
        print(json.dumps(pruned), file=sys.stderr, flush=True)
        unpruned_cold = one_sweep(cold, steps, pruned=False)
    return {"steps": steps, "early_terminate": EARLY_TERMINATE, "unpruned": unpruned, "pruned": pruned,
            "startup": startup,
            "overhead_cold": round(unpruned_cold["wall_s"] / unpruned_cold["train_s"], 2),
            "token_ratio": round(pruned["tokens"] / unpruned["tokens"], 3),
            "best_val_gap": round(pruned["best_val_loss"] - unpruned["best_val_loss"], 4)}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    print(json.dumps(run(ap.parse_args().steps), indent=2))
