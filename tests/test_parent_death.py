"""``tinygpt serve`` killed with SIGKILL (a supervisor after its grace period, a test's clean-up) leaves
nothing behind: its worker and the worker's jobs, warm or training, end by themselves within 10 s
(``worker/parent.py``), and a run that was training stops at a step boundary, back in the queue."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import pytest

from app.db import session_scope
from app.models import Run
from app.settings import Settings

from .service_helpers import Home, Proc, free_port, make_home, wait_for

RUN = {"preset": "tiny", "device": "cpu", "precision": "fp32", "batch_size": 4, "steps": 100_000, "eval_every": 10,
       "sample_every": 0, "threads": 1}


def processes_of(home: Path) -> list[int]:
    """Every live process started for this home (its environment names it): serve, the worker, its jobs."""
    marker = f"TINYGPT_HOME={home}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environment = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or a zombie
            continue
        if marker in environment:
            found.append(int(entry.name))
    return found


def serving(home: Home) -> tuple[Proc, str]:
    port = free_port()
    return Proc(["serve", "--port", str(port), "--devices", "cpu"], home, "serve"), f"http://127.0.0.1:{port}"


def up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def wait_until_serving(home: Home, url: str) -> None:
    """The app answers, and serve, its worker and the worker's warm job all run."""
    wait_for(lambda: up(url) and len(processes_of(home.path)) >= 3, timeout=90, message="serve, worker, warm job")


@pytest.mark.parametrize("moment", ["starting", "idle", "training"])
def test_serve_killed_leaves_no_process_behind(tmp_path, slice_path, warm_cache, moment):
    home = make_home(tmp_path, slice_path, warm_cache, TINYGPT_WARM_JOBS="true")
    serve, url = serving(home)
    run_id = None
    try:
        if moment == "starting":
            time.sleep(1.0)  # the worker is still importing its modules
        else:
            wait_until_serving(home, url)
        if moment == "training":
            with httpx.Client(base_url=url, timeout=30) as c:
                run_id = c.post("/api/runs", json=RUN).json()[0]["id"]
                wait_for(lambda: c.get(f"/api/runs/{run_id}").json()["last_step"] >= 12, timeout=120,
                         message="training past its first checkpoint")
        left = [p for p in processes_of(home.path) if p != serve.popen.pid]
        assert moment == "starting" or len(left) >= 2 + (moment == "training")  # worker, warm job (and the run's job)
        serve.signal(signal.SIGKILL)
        serve.popen.wait()
        killed = time.monotonic()
        try:
            wait_for(lambda: not processes_of(home.path), timeout=10, interval=0.1, message="no process left")
        except TimeoutError:
            pytest.fail(f"left: {processes_of(home.path)}; serve's log ends:\n{serve.output()[-3000:]}")
        assert time.monotonic() - killed < 10
    finally:
        serve.stop()
    if run_id is not None:  # stopped at a step boundary, last.pt saved, back in the queue to resume
        with session_scope(Settings(home=home.path)) as s:
            run = s.get(Run, run_id)
            assert (run.status, run.error, run.pid) == ("queued", None, None)
            assert run.last_step >= 12 and (home.path / "runs" / str(run_id) / "last.pt").exists()
    assert "Traceback" not in serve.output()
