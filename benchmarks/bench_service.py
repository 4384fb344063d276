"""The service: live-event latency and what watching clients cost a training run.

- latency: this process writes metric events into the database the way a job does (one
  transaction per metric, 10 per second); 1 and then 100 SSE clients on that run record
  when each event arrives. p50/p95 of (received - written).
- overhead: the same tiny-preset run (one training thread) through the real worker, with no
  client and with 100 clients streaming its events, alternating three times; the ratio of
  their median training tokens/s.

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


async def one_training(app: AppServer, clients: int, steps: int) -> float:
    async with httpx.AsyncClient(base_url=app.url, timeout=30) as c:
        # threads=1: on a 2-core machine the training run gets one core and the app and the clients
        # share the other, as on any machine with a spare core; both arms of the comparison use it.
        body = {"preset": "tiny", "device": "cpu", "precision": "fp32", "steps": steps, "eval_every": steps,
                "batch_size": 8, "seed": 1, "threads": 1}
        run = (await c.post("/api/runs", json=body)).json()[0]
        stop = asyncio.Event()
        watchers = [asyncio.create_task(_watch(f"{app.url}/api/runs/{run['id']}/events", stop))
                    for _ in range(clients)]
        while (await get_json(c, f"/api/runs/{run['id']}"))["status"] not in ("succeeded", "failed"):
            await asyncio.sleep(0.5)
        stop.set()
        await asyncio.gather(*watchers, return_exceptions=True)
        metrics = await get_json(c, f"/api/runs/{run['id']}/metrics")
        rates = [m["tokens_per_sec"] for m in metrics if m["tokens_per_sec"] > 0]
        return statistics.median(rates)


def run(clients: int = 100, steps: int = 300, rounds: int = 3) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        home = Home(Path(tmp) / "home", holmes_path())
        home.path.mkdir()
        app = AppServer(home)
        try:
            with app.client() as c:
                run_id = c.post("/api/runs", json={"preset": "tiny", "device": "cpu", "steps": 10}).json()[0]["id"]
            lat = [asyncio.run(latency(app, home, run_id, n)) for n in (1, clients)]
            worker = Worker(home, "bench")
            try:
                # warm the tokenizer cache with a first short run
                asyncio.run(one_training(app, 0, 20))
                quiet, watched = [], []
                for _ in range(rounds):
                    quiet.append(asyncio.run(one_training(app, 0, steps)))
                    watched.append(asyncio.run(one_training(app, clients, steps)))
            finally:
                worker.stop()
        finally:
            app.stop()
    return {
        "latency": lat,
        "overhead": {
            "clients": clients,
            "steps": steps,
            "quiet_tokens_per_sec": quiet,
            "watched_tokens_per_sec": watched,
            "ratio": statistics.median(watched) / statistics.median(quiet),
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    print(machine())
    print(json.dumps(run(args.clients, args.steps), indent=2))


if __name__ == "__main__":
    main()
