"""Long runs and many runs (issue 20): how long a page takes to show a run's history, and what it costs
the database. A baseline: the run page still replays a run's events; the columns request is measured
beside it, so the next step can be judged against both.

- run page: rows written as a job writes them (a ``metrics`` row and its ``metric`` event each, in bulk),
  then Chromium opens the run page; the time until the page holds every row and shows the last step.
- API: ``GET /api/runs/{id}/metrics`` (every row, JSON) and ``format=columns&max_points=2000`` (thinned in
  the database), for each size; the columns request also at 1,000,000 rows (rows only, no events).
- database bytes per logged row (file growth over the rows written, SQLite).
- run list: the first page of ``/`` with 10,000 runs in the database.

    python -m benchmarks.bench_history [--sizes 1000,10000,100000]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from .common import ROOT, holmes_path

sys.path.insert(0, str(ROOT))
from tests.browser import CHROMIUM  # noqa: E402
from tests.service_helpers import AppServer, Home  # noqa: E402


def settings_for(home: Home):  # noqa: ANN201
    from app.settings import Settings

    return Settings(home=home.path)


def add_run(home: Home, rows: int, *, events: bool, name: str) -> int:
    """A finished run with ``rows`` metrics rows (and their events, as a job writes them)."""
    from sqlalchemy import insert

    from app.db import init_db, session_scope
    from app.models import Event, EventType, Metric, Run, RunStatus

    settings = settings_for(home)
    init_db(settings)
    with session_scope(settings) as s:
        run = Run(name=name, status=RunStatus.succeeded, config={"preset": "holmes", "steps": rows, "eval_every": 500},
                  device="cuda:0", precision="bf16", last_step=rows - 1)
        s.add(run)
        s.flush()
        run_id = run.id
    for start in range(0, rows, 50_000):
        batch = [{"step": i, "train_loss": 8.0 * 0.9999**i, "val_loss": 8.0 * 0.9999**i + 0.1 if i % 500 == 0 else None,
                  "lr": 1e-3, "tokens_per_sec": 250_000.0, "elapsed_sec": i * 0.05, "tokens_seen": i * 16_384,
                  "epochs": i / 10_000, "peak_mem_mib": 9000.0} for i in range(start, min(rows, start + 50_000))]
        with session_scope(settings) as s:
            s.execute(insert(Metric), [{"run_id": run_id, **r} for r in batch])
            if events:
                s.execute(insert(Event), [{"run_id": run_id, "type": EventType.metric, "data": r} for r in batch])
    return run_id


def db_bytes(db: Path) -> int:
    """The database file's size with its write-ahead log folded in (SQLite's WAL mode)."""
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return db.stat().st_size


def page_seconds(browser, url: str, rows: int) -> float:  # noqa: ANN001
    """Navigation start to the page holding every row with the last step shown."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    t0 = time.perf_counter()
    page.goto(url)
    page.wait_for_function(f"window.runState && window.runState.rows.length === {rows} && "
                           f"document.getElementById('progress-text').textContent.startsWith('{rows - 1} ')",
                           timeout=600_000, polling=50)
    seconds = time.perf_counter() - t0
    page.close()
    return seconds


def api_seconds(url: str, **params: object) -> float:
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        httpx.get(url, params=params, timeout=600).raise_for_status()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(sizes: tuple[int, ...] = (1_000, 10_000, 100_000)) -> dict:
    from playwright.sync_api import sync_playwright

    out: dict = {"sizes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        home = Home(Path(tmp) / "home", holmes_path())
        home.path.mkdir()
        db = home.path / "tinygpt.db"
        app = AppServer(home)
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
                for n in sizes:
                    before = db_bytes(db)
                    run_id = add_run(home, n, events=True, name=f"{n} rows")
                    grown = db_bytes(db) - before
                    base = f"{app.url}/api/runs/{run_id}/metrics"
                    out["sizes"][n] = {
                        "page_s": round(page_seconds(browser, f"{app.url}/runs/{run_id}", n), 2),
                        "metrics_json_s": round(api_seconds(base), 3),
                        "columns_2000_s": round(api_seconds(base, format="columns", max_points=2000), 3),
                        "db_bytes_per_row": round(grown / n),
                    }
                    print(n, out["sizes"][n], flush=True)
                browser.close()
            big = add_run(home, 1_000_000, events=False, name="a million rows")
            out["columns_2000_s_1m_rows"] = round(api_seconds(f"{app.url}/api/runs/{big}/metrics", format="columns",
                                                              max_points=2000), 3)
            many = list_with_runs(home, app, 10_000)
            out["run_list_s_10k_runs"] = many
        finally:
            app.stop()
    return out


def list_with_runs(home: Home, app: AppServer, count: int) -> float:
    from sqlalchemy import insert

    from app.db import session_scope
    from app.models import Run

    with session_scope(settings_for(home)) as s:
        s.execute(insert(Run), [{"name": f"run {i}", "status": "succeeded", "config": {"preset": "tiny", "steps": 10},
                                 "requested_device": "cpu", "tags": [], "kind": "train", "origin": "dashboard"}
                                for i in range(count)])
    return round(api_seconds(f"{app.url}/"), 3)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000")
    args = ap.parse_args()
    print(json.dumps(run(tuple(int(s) for s in args.sizes.split(","))), indent=2))
