"""The service: live-event latency and what watching clients cost a training run.

- latency: this process writes metric events into the database the way a job does (one
  transaction per metric, 10 per second); 1 and then 100 SSE clients on that run record
  when each event arrives. p50/p95 of (received - written).
- overhead: one long tiny-preset run (one training thread, pinned to the first CPU; the app
  and the clients on the others) through the real worker, with 100 clients streaming its
  events during every other window of a few seconds; the median over watched windows of
  (watched tokens/s) / (mean of the two quiet neighbours), and the app's CPU use in each kind
  of window (what serving would take from a run that shares the app's CPU).

    python -m benchmarks.bench_service [--clients 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from .common import ROOT, holmes_path, machine

sys.path.insert(0, str(ROOT))
from tests.service_helpers import AppServer, Home, Worker  # noqa: E402


async def _listen(url: str, n_events: int, arrivals: list[float], ready: asyncio.Event, counter: list[int],
                  n_clients: int) -> None:
    connected_at = time.time()
    async with httpx.AsyncClient(timeout=httpx.Timeout(120, connect=10)) as client:
        async with client.stream("GET", url) as response:
            counter[0] += 1
            if counter[0] == n_clients:
                ready.set()
            got = 0
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    data = json.loads(line[5:])
                    if data.get("written_at", 0) > connected_at:  # live events only, not the replayed history
                        arrivals.append(time.time() - data["written_at"])
                        got += 1
                        if got >= n_events:
                            return


def write_metrics(home: Home, run_id: int, n: int, rate: float) -> None:
    os.environ["TINYGPT_HOME"] = str(home.path)
    from app.db import session_scope
    from app.models import EventType
    from app.services.events import record_event
    from app.settings import Settings

    settings = Settings(home=home.path)
    for i in range(n):
        with session_scope(settings) as s:
            record_event(s, run_id=run_id, type=EventType.metric, data={"step": i, "written_at": time.time()})
        time.sleep(1 / rate)


async def latency(app: AppServer, home: Home, run_id: int, clients: int, n_events: int = 50) -> dict:
    arrivals: list[float] = []
    ready = asyncio.Event()
    counter = [0]
    url = f"{app.url}/api/runs/{run_id}/events"
    tasks = [asyncio.create_task(_listen(url, n_events, arrivals, ready, counter, clients)) for _ in range(clients)]
    await asyncio.wait_for(ready.wait(), 60)
    await asyncio.sleep(0.5)
    await asyncio.to_thread(write_metrics, home, run_id, n_events, 10.0)
    await asyncio.wait_for(asyncio.gather(*tasks), 120)
    arrivals.sort()
    return {
        "clients": clients,
        "events": len(arrivals),
        "p50_ms": 1000 * statistics.median(arrivals),
        "p95_ms": 1000 * arrivals[int(0.95 * (len(arrivals) - 1))],
    }


async def _watch(url: str, stop: asyncio.Event) -> None:
    async with httpx.AsyncClient(timeout=httpx.Timeout(600, connect=10)) as client:
        async with client.stream("GET", url) as response:
            async for line in response.aiter_lines():
                if stop.is_set() or line.startswith("event: end"):
                    return


async def get_json(client: httpx.AsyncClient, url: str, attempts: int = 5) -> dict | list:
    """GET with a few retries: a keep-alive connection the server just closed is not a result."""
    for attempt in range(attempts):
        try:
            response = await client.get(url)
            response.raise_for_status()
            return response.json()
        except httpx.TransportError:
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(0.2)
    raise AssertionError("unreachable")


async def watched_windows(app: AppServer, app_pid: int, clients: int, windows: int, seconds: float) -> dict:
    """One long tiny-preset run; ``clients`` SSE clients watch it during every other window.

    Windows alternate quiet, watched, quiet, ... (``2 * windows + 1`` in all, so every watched
    window has a quiet one on each side). A window's speed comes from the run's own metrics
    (tokens seen over the trainer's elapsed time, between the first and last metric inside
    the window's steps); each watched window is compared with the mean of its two neighbours,
    so a slow drift of the machine's speed cancels out.
    """
    async with httpx.AsyncClient(base_url=app.url, timeout=30) as c:
        # threads=1: on a 2-core machine the training run gets one core and the app and the clients
        # share the other, as on any machine with a spare core.
        body = {"preset": "tiny", "device": "cpu", "precision": "fp32", "steps": 1_000_000, "eval_every": 1_000_000,
                "batch_size": 8, "seed": 1, "threads": 1}
        run = (await c.post("/api/runs", json=body)).json()[0]
        url = f"/api/runs/{run['id']}"
        while (await get_json(c, url))["last_step"] < 50:  # past start-up and the first steps
            await asyncio.sleep(0.5)
        bounds = [(await get_json(c, url))["last_step"]]
        cpu = [(cpu_seconds(app_pid), time.monotonic())]
        for window in range(2 * windows + 1):
            stop = asyncio.Event()
            watchers = []
            if window % 2 == 1:
                watchers = [asyncio.create_task(_watch(f"{app.url}{url}/events", stop)) for _ in range(clients)]
            await asyncio.sleep(seconds)
            stop.set()
            for task in watchers:
                task.cancel()
            await asyncio.gather(*watchers, return_exceptions=True)
            bounds.append((await get_json(c, url))["last_step"])
            cpu.append((cpu_seconds(app_pid), time.monotonic()))
        await c.post(f"{url}/cancel")
        metrics = await get_json(c, f"{url}/metrics")
    rates = [window_rate(metrics, lo, hi) for lo, hi in zip(bounds, bounds[1:], strict=False)]
    quiet, watched = rates[0::2], rates[1::2]
    ratios = [w / ((quiet[i] + quiet[i + 1]) / 2) for i, w in enumerate(watched)]
    app_load = [(b[0] - a[0]) / (b[1] - a[1]) for a, b in zip(cpu, cpu[1:], strict=False)]  # CPU-s per s
    return {"quiet_tokens_per_sec": quiet, "watched_tokens_per_sec": watched, "ratios": ratios,
            "app_cpu_quiet": statistics.median(app_load[0::2]), "app_cpu_watched": statistics.median(app_load[1::2])}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pin(pid: int, cpus: set[int]) -> None:
    """Keep a process (and the children it starts from now on) on these CPUs, where the OS allows it."""
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2:
        os.sched_setaffinity(pid, cpus)


def window_rate(metrics: list[dict], first_step: int, last_step: int) -> float:
    inside = [m for m in metrics if first_step <= m["step"] <= last_step and m["elapsed_sec"] > 0]
    if len(inside) < 2:
        raise SystemExit(f"too few metrics between steps {first_step} and {last_step}: lengthen the windows")
    a, b = inside[0], inside[-1]
    return (b["tokens_seen"] - a["tokens_seen"]) / (b["elapsed_sec"] - a["elapsed_sec"])


def run(clients: int = 100, windows: int = 10, seconds: float = 10.0) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        # all the clients come from this one address: lift the per-client stream cap above them
        home = Home(Path(tmp) / "home", holmes_path(), {"TINYGPT_MAX_STREAMS_PER_CLIENT": str(clients + 10)})
        home.path.mkdir()
        app = AppServer(home)
        try:
            with app.client() as c:
                run_id = c.post("/api/runs", json={"preset": "tiny", "device": "cpu", "steps": 10}).json()[0]["id"]
            lat = [asyncio.run(latency(app, home, run_id, n)) for n in (1, clients)]
            worker = Worker(home, "bench")
            # The training job (started by the worker) gets the first CPU to itself; the app, and this
            # process with its 100 clients, share the rest: the run measures what serving costs it,
            # and the app's own CPU time is recorded beside it.
            cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
            if len(cpus) >= 2:
                pin(worker.popen.pid, {cpus[0]})
                pin(app.popen.pid, set(cpus[1:]))
                pin(os.getpid(), set(cpus[1:]))
            try:
                overhead = asyncio.run(watched_windows(app, app.popen.pid, clients, windows, seconds))
            finally:
                worker.stop()
        finally:
            app.stop()
    overhead.update(clients=clients, windows=windows, window_seconds=seconds,
                    ratio=statistics.median(overhead["ratios"]))
    return {"latency": lat, "overhead": overhead}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--windows", type=int, default=10, help="watched windows (quiet ones: one more)")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each window")
    args = ap.parse_args()
    print(machine())
    print(json.dumps(run(args.clients, args.windows, args.seconds), indent=2))


if __name__ == "__main__":
    main()
