"""Form handlers never wait for SQLite's write lock on the event loop: while another process holds
the lock, the new-run form, the benchmark form and a dataset upload wait in worker threads, and
every other request (here the health check) is answered at once. A real app on a real database file."""

from __future__ import annotations

import sqlite3
import threading
import time

import httpx

from .service_helpers import AppServer, Home

HOLD_SEC = 3.0


def test_writes_wait_for_the_lock_off_the_event_loop(tmp_path, slice_path):
    home = Home(tmp_path, slice_path)
    app = AppServer(home)
    try:
        results: dict[str, int] = {}

        def post(name: str, path: str, **kwargs: object) -> None:
            results[name] = httpx.post(f"{app.url}{path}", timeout=60, **kwargs).status_code

        form = {"preset": "tiny", "device": "cpu", "precision": "fp32", "steps": "2", "batch_size": "2",
                "eval_every": "2", "seed": "1", "dataset": "holmes", "sample_prompt": "Holmes", "gpus": "1"}
        writers = [
            threading.Thread(target=post, args=("run", "/new"), kwargs={"data": form}),
            threading.Thread(target=post, args=("benchmark", "/benchmarks"),
                             kwargs={"data": {"preset": "tiny", "device": "cpu", "batch_sizes": "2"}}),
            threading.Thread(target=post, args=("upload", "/partials/datasets"),
                             kwargs={"data": {"name": "poems"}, "files": {"file": ("p.txt", b"verse\n")}}),
        ]
        lock = sqlite3.connect(home.path / "tinygpt.db", isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")  # holds the write lock, as a busy worker can
        for w in writers:
            w.start()
        time.sleep(0.5)  # the writes are now waiting for the lock
        slowest = 0.0
        deadline = time.monotonic() + HOLD_SEC - 0.5
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            assert httpx.get(f"{app.url}/healthz", timeout=10).status_code == 200
            slowest = max(slowest, time.monotonic() - t0)
            time.sleep(0.1)
        lock.execute("COMMIT")
        lock.close()
        for w in writers:
            w.join(60)
        assert slowest < 0.5, f"a request waited {slowest:.2f} s behind a write"
        assert results == {"run": 200, "benchmark": 200, "upload": 200}
    finally:
        app.stop()
    assert '"GET /healthz' not in app.output()  # no access log by default (TINYGPT_ACCESS_LOG)
