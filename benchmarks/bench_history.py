"""Long runs and many runs (issue 20): how long a page takes to show a run's history, and what it costs the
database.

- run page: a finished run with N logged rows (each row with its event, as a job writes them; the outbox then
  compacted, as the app does once the events are older than its window), opened in Chromium: the time from
  navigation until the page shows the last step (median of 3), in a browser profile that opened the dashboard
  before (its static files kept) and in a fresh one. The page reads the history thinned by the
  server (``format=columns&max_points``) and streams from its end.
- API: ``format=columns&max_points=2000`` for each size.
- database bytes per logged row: growth of the vacuumed SQLite file over the rows written.
- comparison page for 5 runs of 100,000 rows; the run list with 10,000 runs in the database (Chromium).

    python -m benchmarks.bench_history [--sizes 1000,10000,100000,1000000]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import httpx

from .common import ROOT, holmes_path

sys.path.insert(0, str(ROOT))
from tests.browser import CHROMIUM  # noqa: E402
from tests.service_helpers import AppServer, Home  # noqa: E402


def settings_for(home: Home):  # noqa: ANN201
    from app.settings import Settings

    return Settings(home=home.path)


def add_run(home: Home, rows: int, *, name: str, options: dict | None = None) -> int:
    """A finished run with ``rows`` metrics rows and their events, in bulk; then the outbox compacted."""
    from sqlalchemy import insert

    from app.db import init_db, session_scope
    from app.models import Event, EventType, Metric, Run, RunStatus, utcnow
    from app.services.lifecycle import change_status
    from app.services.metric_blocks import rebuild_blocks
    from app.services.outbox import compact_outbox

    settings = settings_for(home)
    init_db(settings)
    with session_scope(settings) as s:
        run = Run(name=name, status=RunStatus.running,
                  config={"preset": "holmes", "steps": rows, "eval_every": 500, **(options or {})},
                  device="cuda:0", precision="bf16", last_step=rows - 1)
        s.add(run)
        s.flush()
        run_id = run.id
    for start in range(0, rows, 50_000):
        batch = [{"step": i, "train_loss": 8.0 * 0.9999**i + (i % 17) / 100,
                  "val_loss": 8.0 * 0.9999**i + 0.1 if i % 500 == 0 else None,
                  "lr": 1e-3, "tokens_per_sec": 250_000.0 + i % 1000, "elapsed_sec": i * 0.05,
                  "tokens_seen": i * 16_384, "epochs": i / 10_000, "peak_mem_mib": 9000.0}
                 for i in range(start, min(rows, start + 50_000))]
        with session_scope(settings) as s:
            s.execute(insert(Metric), [{"run_id": run_id, **r} for r in batch])
            s.execute(insert(Event), [{"run_id": run_id, "type": EventType.metric, "data": r} for r in batch])
    with session_scope(settings) as s:
        rebuild_blocks(s, run_id=run_id)
        change_status(s, s.get(Run, run_id), RunStatus.succeeded, settings=settings, finished_at=utcnow())
        s.commit()
        compact_outbox(s, written_before=utcnow() + timedelta(seconds=1))
    return run_id


def db_bytes(db: Path) -> int:
    """The database file's size, vacuumed, with its write-ahead log folded in (SQLite's WAL mode)."""
    with sqlite3.connect(db) as conn:
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return db.stat().st_size


def page_seconds(browser, url: str, ready: str, *, warm) -> float:  # noqa: ANN001
    """Median of 3: navigation start until ``ready`` (a JavaScript condition) holds; in a fresh browser profile
    (cold: every static file downloaded), or in ``warm``, a profile that opened the dashboard before."""
    times = []
    for _ in range(3):
        context = warm or browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        t0 = time.perf_counter()
        page.goto(url)
        page.wait_for_function(ready, timeout=600_000, polling=20)
        times.append(time.perf_counter() - t0)
        page.close()
        if context is not warm:
            context.close()
    return statistics.median(times)


def both(browser, warm, url: str, ready: str) -> dict:  # noqa: ANN001
    return {"page_s": round(page_seconds(browser, url, ready, warm=warm), 3),
            "page_cold_s": round(page_seconds(browser, url, ready, warm=None), 3)}


def last_row_shown(rows: int) -> str:
    return (f"window.runState && window.runState.loaded && "
            f"document.getElementById('progress-text').textContent.startsWith('{rows - 1} ')")


def api_seconds(url: str, **params: object) -> float:
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        httpx.get(url, params=params, timeout=600).raise_for_status()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(sizes: tuple[int, ...] = (1_000, 10_000, 100_000, 1_000_000)) -> dict:
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
                warm = browser.new_context(viewport={"width": 1280, "height": 900})
                warm.new_page().goto(f"{app.url}/")  # a user who had the dashboard open before
                big: list[int] = []
                for n in sizes:
                    before = db_bytes(db)
                    run_id = add_run(home, n, name=f"{n} rows")
                    grown = db_bytes(db) - before
                    big += [run_id] if n == 100_000 else []
                    out["sizes"][n] = {
                        **both(browser, warm, f"{app.url}/runs/{run_id}", last_row_shown(n)),
                        "columns_2000_s": round(api_seconds(f"{app.url}/api/runs/{run_id}/metrics",
                                                            format="columns", max_points=2000), 3),
                        "db_bytes_per_row": round(grown / n),
                    }
                    print(n, out["sizes"][n], flush=True)
                big += [add_run(home, 100_000, name=f"compared {k}") for k in range(5 - len(big))]
                ids = ",".join(map(str, big))
                out["compare_5x100k"] = both(browser, warm, f"{app.url}/compare?ids={ids}",
                                             "document.querySelector('#compare-chart canvas')")
                out["compare_5x100k_api_s"] = round(api_seconds(f"{app.url}/api/compare", ids=ids), 3)
                # 5 groups x 3 runs (issue 29): 15 runs of 100,000 rows, grouped by their learning rate
                grouped = [add_run(home, 100_000, name=f"group {g} run {k}", options={"lr": 1e-3 * (g + 1), "seed": k})
                           for g in range(5) for k in range(3)]
                query = f"ids={','.join(map(str, grouped))}&group_by=lr"
                out["compare_groups_5x3x100k"] = both(
                    browser, warm, f"{app.url}/compare?{query}",
                    "document.querySelector('#compare-chart canvas') && document.getElementById('group-verdict') === null"
                    " && document.querySelectorAll('#groups-table thead th').length === 6")
                out["compare_groups_5x3x100k_api_s"] = round(api_seconds(
                    f"{app.url}/api/compare", ids=",".join(map(str, grouped)), group_by="lr"), 3)
                add_runs(home, 10_000)
                out["run_list_10k_runs"] = both(browser, warm, f"{app.url}/",
                                                "document.querySelectorAll('#runs-table tbody tr').length >= 50")
                out["run_list_10k_runs_api_s"] = api_seconds(f"{app.url}/api/runs")
                browser.close()
        finally:
            app.stop()
    return out


def add_runs(home: Home, count: int) -> None:
    """``count`` finished runs, each with its median tokens/s stored as a run's end stores it."""
    from sqlalchemy import insert

    from app.db import session_scope
    from app.models import Run

    with session_scope(settings_for(home)) as s:
        s.execute(insert(Run), [{"name": f"run {i}", "status": "succeeded", "config": {"preset": "tiny", "steps": 10},
                                 "requested_device": "cpu", "tags": [], "kind": "train", "origin": "dashboard",
                                 "tokens_per_sec": 1000.0 + i} for i in range(count)])
        s.commit()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000,1000000")
    args = ap.parse_args()
    print(json.dumps(run(tuple(int(s) for s in args.sizes.split(","))), indent=2))
