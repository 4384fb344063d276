"""Load on the read API and on the event streams while a run trains (loopback only, bounded).

- api: an open-loop client sends GETs at a fixed rate (default 200/s for 60 s) across the read
  API (a run, its metrics and samples, the run list, presets, datasets); each request's latency
  is counted from the moment it was due, so a slow answer also delays the ones queued behind it
  (no coordinated omission). Reported: the rate achieved, p50/p99/max latency, errors.
- streams: N clients (default 200) follow the training run's event stream for 60 s; afterwards
  each client's event ids are compared with the run's events in the database: dropped,
  duplicated and out-of-order events are counted.

The training job and this client are pinned to the first CPU, the app to the rest: the app has a
core of its own, as on a machine with a core to spare, and the load it serves comes from
elsewhere (a client on the app's own core would take a fifth of it at 200 requests/s). Used by `tests/test_load.py` (slow) and `python -m benchmarks.run`.

    python -m benchmarks.bench_load [--rates 200,100] [--seconds 60] [--streams 200]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp
import httpx

from .common import ROOT, holmes_path, machine

sys.path.insert(0, str(ROOT))
from tests.service_helpers import AppServer, Home, Worker, wait_for  # noqa: E402

RUN = {"preset": "tiny", "device": "cpu", "precision": "fp32", "batch_size": 8, "seed": 1, "threads": 1}


def read_paths(run_id: int) -> list[str]:
    """The read API as a dashboard user's scripts use it."""
    return [f"/api/runs/{run_id}", f"/api/runs/{run_id}/metrics", f"/api/runs/{run_id}/samples",
            "/api/runs?limit=20", "/api/presets", "/api/datasets"]


@contextmanager
def gc_frozen() -> Iterator[None]:
    """Keep the objects alive now (torch's ~200,000 in this process) out of the garbage collector
    while measuring: a full collection walks them all, and its ~0.4 s pause in this client showed
    up as a stall of the app in the p99 (the app freezes its own the same way, in app.main)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


async def open_loop(url: str, paths: list[str], rate: float, seconds: float) -> dict:
    """Send ``rate`` requests a second for ``seconds``, whatever the answers' pace."""
    with gc_frozen():
        return await offer(url, paths, rate, seconds)


async def offer(url: str, paths: list[str], rate: float, seconds: float) -> dict:
    latencies: list[float] = []
    errors: list[str] = []
    total = int(rate * seconds)
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(url, connector=aiohttp.TCPConnector(limit=100), timeout=timeout) as client:

        async def one(i: int, due: float) -> None:
            path = paths[i % len(paths)]
            try:
                async with client.get(path) as response:
                    await response.read()
                    if response.status != 200:
                        errors.append(f"{response.status} {path}")
            except (aiohttp.ClientError, TimeoutError) as exc:
                errors.append(f"{type(exc).__name__} {path}")
            latencies.append(time.perf_counter() - due)

        start = time.perf_counter()
        tasks = []
        for i in range(total):
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i, due)))
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
    latencies.sort()
    return {
        "requests": total, "seconds": round(elapsed, 1), "achieved_per_sec": total / elapsed,
        "p50_ms": 1000 * latencies[len(latencies) // 2], "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
        "max_ms": 1000 * latencies[-1], "errors": len(errors), "error_examples": errors[:5],
    }


async def follow(client: aiohttp.ClientSession, url: str, seconds: float, ids: list[int], cuts: list[int]) -> None:
    """One client on the stream for ``seconds`` (or until the run ends): every event id it got.

    Like a browser's EventSource, a client whose connection is cut reconnects with
    Last-Event-ID (each cut is counted in ``cuts``)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        headers = {"Last-Event-ID": str(ids[-1])} if ids else {}
        try:
            async with client.get(url, headers=headers) as response:
                response.raise_for_status()
                async for raw in response.content:
                    line = raw.decode().rstrip("\r\n")
                    if line.startswith("id:"):
                        ids.append(int(line[3:].strip()))
                    elif line.startswith("event: end") or time.monotonic() > deadline:
                        return
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError):
            cuts.append(1)


async def many_streams(url: str, clients: int, seconds: float) -> tuple[list[list[int]], int]:
    """``clients`` connections following one stream at once: the ids each got, and how many
    times a connection was cut (and resumed with Last-Event-ID)."""
    received: list[list[int]] = [[] for _ in range(clients)]
    cuts: list[int] = []
    timeout = aiohttp.ClientTimeout(total=seconds + 60, sock_connect=10)
    with gc_frozen():
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as client:
            await asyncio.gather(*(follow(client, url, seconds, received[i], cuts) for i in range(clients)))
    return received, len(cuts)


def stream_check(received: list[list[int]], expected: list[int]) -> dict:
    """Each client must hold a gap-free, duplicate-free run of the run's events from the start."""
    dropped = duplicated = disordered = 0
    for ids in received:
        if ids != sorted(ids):
            disordered += 1
        if len(ids) != len(set(ids)):
            duplicated += 1
        if ids != expected[: len(ids)]:
            dropped += 1
    lengths = [len(ids) for ids in received]
    return {"clients": len(received), "events_min": min(lengths), "events_median": statistics.median(lengths),
            "clients_with_dropped": dropped, "clients_with_duplicates": duplicated,
            "clients_out_of_order": disordered}


@contextmanager
def training_site(streams_allowed: int) -> Iterator[tuple[AppServer, int]]:
    """A fresh home with an app, a worker pinned to the first CPU (with this client) and a long
    tiny run training."""
    cpus = sorted(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as tmp:
        home = Home(Path(tmp) / "home", holmes_path(), {"TINYGPT_MAX_STREAMS_PER_CLIENT": str(streams_allowed)})
        home.path.mkdir()
        app = AppServer(home)
        worker = Worker(home, "load")
        if len(cpus) >= 2:
            os.sched_setaffinity(worker.popen.pid, cpus[:1])
            os.sched_setaffinity(app.popen.pid, cpus[1:])
            os.sched_setaffinity(0, cpus[:1])
        try:
            with app.client() as c:
                for i in range(4):  # a run list with finished runs in it
                    c.post("/api/runs", json={**RUN, "steps": 10, "name": f"done-{i}"}).raise_for_status()
                wait_for(lambda: c.get("/api/runs", params={"status": "succeeded"}).json()["total"] == 4,
                         timeout=600, interval=0.5, message="4 short runs")
                run_id = c.post("/api/runs", json={**RUN, "steps": 1_000_000, "eval_every": 100,
                                                   "name": "training"}).json()[0]["id"]
                wait_for(lambda: c.get(f"/api/runs/{run_id}").json()["last_step"] >= 20, timeout=120,
                         message="training")
            yield app, run_id
        finally:
            os.sched_setaffinity(0, cpus)
            worker.stop()
            app.stop()


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def run(rates: tuple[float, ...] = (200, 100), seconds: float = 60, streams: int = 200) -> dict:
    """The read API at each offered rate (the issue's 200/s, and a lower one for comparison), then
    the streams, all against one training site."""
    log("starting the app, a worker and a training run")
    with training_site(streams + 10) as (app, run_id):
        api = {}
        for rate in rates:
            log(f"read API: {rate:g} requests/s for {seconds:g} s")
            api[f"{rate:g}"] = {"rate": rate, **asyncio.run(open_loop(app.url, read_paths(run_id), rate, seconds))}
        log(f"{streams} event streams for {seconds:g} s")
        received, cuts = asyncio.run(many_streams(f"{app.url}/api/runs/{run_id}/events", streams, seconds))
        log("checking the streams")
        with app.client() as c:
            last_step = c.get(f"/api/runs/{run_id}").json()["last_step"]
        expected = all_event_ids(app, run_id, until=max(max(ids) for ids in received))
        return {"api": api, "streams": {"seconds": seconds, "reconnects": cuts, **stream_check(received, expected)},
                "run_last_step": last_step}


def all_event_ids(app: AppServer, run_id: int, until: int) -> list[int]:
    """The run's event ids up to ``until``, from one fresh read of its stream."""
    ids: list[int] = []
    with httpx.stream("GET", f"{app.url}/api/runs/{run_id}/events", timeout=30) as response:
        for line in response.iter_lines():
            if line.startswith("id:"):
                ids.append(int(line[3:].strip()))
                if ids[-1] >= until:
                    break
    return ids


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="200,100", help="offered requests/s, comma-separated")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--streams", type=int, default=200)
    args = ap.parse_args()
    print(machine())
    rates = tuple(float(r) for r in args.rates.split(","))
    print(json.dumps(run(rates, args.seconds, args.streams), indent=2))


if __name__ == "__main__":
    main()
