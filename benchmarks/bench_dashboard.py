"""The dashboard's own costs: a run through the API and worker vs `tinygpt train`; API load.

- overhead: the same short tiny-preset run (one training thread), alternately through the
  real app + worker and as a `tinygpt train` process, both pinned to the same CPU. The
  figure is the ratio of their median training tokens/s (each run's own metrics), and
  beside it the ratio of wall time from submission to finished.
- api: 500 runs in the database; concurrent clients call `GET /api/runs` (first page of 50)
  and, as the floor the framework sets, `GET /healthz`, in alternating rounds. Requests/s
  and p99 latency of each, and the list's requests/s as a fraction of the floor's.

    python -m benchmarks.bench_dashboard [--rounds 3] [--steps 300]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from .common import ROOT, holmes_path, machine

sys.path.insert(0, str(ROOT))
from tests.service_helpers import AppServer, Home, Worker, wait_for  # noqa: E402

RUN = {"preset": "tiny", "device": "cpu", "precision": "fp32", "batch_size": 8, "seed": 1, "threads": 1}


def training_cpu() -> set[int] | None:
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return {cpus[0]} if len(cpus) >= 2 else None


def median_rate(rows: list[dict]) -> float:
    return statistics.median(float(r["tokens_per_sec"]) for r in rows if float(r["tokens_per_sec"] or 0) > 0)


def through_dashboard(app: AppServer, steps: int) -> tuple[float, float]:
    with app.client() as c:
        t0 = time.perf_counter()
        run = c.post("/api/runs", json={**RUN, "steps": steps, "eval_every": steps}).json()[0]
        wait_for(lambda: c.get(f"/api/runs/{run['id']}").json()["status"] in ("succeeded", "failed"),
                 timeout=600, interval=0.2, message="run finished")
        wall = time.perf_counter() - t0
        return median_rate(c.get(f"/api/runs/{run['id']}/metrics").json()), wall


def through_cli(home: Home, steps: int, out: Path) -> tuple[float, float]:
    cpu = training_cpu()
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "tinygpt", "train", "--preset", RUN["preset"], "--device", "cpu", "--precision", "fp32",
         "--batch-size", str(RUN["batch_size"]), "--seed", "1", "--threads", "1", "--steps", str(steps),
         "--eval-every", str(steps), "--log-every", "10", "--out", str(out), "--no-progress"],
        check=True, capture_output=True, env=home.env(), cwd=ROOT,
        preexec_fn=(lambda: os.sched_setaffinity(0, cpu)) if cpu else None,
    )
    wall = time.perf_counter() - t0
    with open(out / "metrics.csv") as f:
        return median_rate(list(csv.DictReader(f))), wall


def overhead(home: Home, app: AppServer, rounds: int, steps: int) -> dict:
    worker = Worker(home, "bench")
    cpu = training_cpu()
    if cpu:
        os.sched_setaffinity(worker.popen.pid, cpu)  # its jobs inherit it: the same CPU as the CLI runs
    try:
        through_dashboard(app, 20)  # warm the tokenizer and corpus caches for both arms
        dash, cli = [], []
        for i in range(rounds):
            dash.append(through_dashboard(app, steps))
            cli.append(through_cli(home, steps, home.path / f"cli-{i}"))
    finally:
        worker.stop()
    return {
        "steps": steps,
        "rounds": rounds,
        "dashboard_tokens_per_sec": [d[0] for d in dash],
        "cli_tokens_per_sec": [c[0] for c in cli],
        "dashboard_wall_s": [d[1] for d in dash],
        "cli_wall_s": [c[1] for c in cli],
        "ratio": statistics.median(d[0] for d in dash) / statistics.median(c[0] for c in cli),
        "wall_ratio": statistics.median(c[1] for c in cli) / statistics.median(d[1] for d in dash),
    }


async def load(url: str, concurrency: int, requests: int) -> tuple[float, float]:
    """Requests/s and p99 latency (ms) of ``requests`` GETs from ``concurrency`` clients."""
    latencies: list[float] = []
    queue = iter(range(requests))

    async def client() -> None:
        async with httpx.AsyncClient(timeout=30) as c:
            for _ in queue:
                t0 = time.perf_counter()
                response = await c.get(url)
                latencies.append(time.perf_counter() - t0)
                response.raise_for_status()

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    seconds = time.perf_counter() - t0
    latencies.sort()
    return requests / seconds, 1000 * latencies[int(0.99 * (len(latencies) - 1))]


def api_load(app: AppServer, runs: int = 500, concurrency: int = 10, requests: int = 1000, rounds: int = 3) -> dict:
    with app.client() as c:
        for i in range(runs):
            c.post("/api/runs", json={**RUN, "steps": 10, "name": f"load-{i}", "tags": ["load"]}).raise_for_status()
        total = c.get("/api/runs").json()["total"]
    results: dict[str, list[tuple[float, float]]] = {"list": [], "healthz": []}
    for _ in range(rounds):
        results["list"].append(asyncio.run(load(f"{app.url}/api/runs", concurrency, requests)))
        results["healthz"].append(asyncio.run(load(f"{app.url}/healthz", concurrency, requests)))
    best = {k: max(v, key=lambda r: r[0]) for k, v in results.items()}
    return {
        "runs_in_db": total,
        "concurrency": concurrency,
        "requests_per_round": requests,
        "list_requests_per_sec": best["list"][0],
        "list_p99_ms": best["list"][1],
        "healthz_requests_per_sec": best["healthz"][0],
        "healthz_p99_ms": best["healthz"][1],
        "list_vs_healthz": best["list"][0] / best["healthz"][0],
    }


def run(rounds: int = 3, steps: int = 300) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        home = Home(Path(tmp) / "home", holmes_path())
        home.path.mkdir()
        app = AppServer(home)
        try:
            result = {"overhead": overhead(home, app, rounds, steps), "api": api_load(app)}
        finally:
            app.stop()
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    print(machine())
    print(json.dumps(run(args.rounds, args.steps), indent=2))


if __name__ == "__main__":
    main()
