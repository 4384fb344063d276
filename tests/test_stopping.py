"""Stopping the service with SIGTERM (systemd, Docker, compose) or Ctrl-C: `tinygpt serve`, `tinygpt app`
and `tinygpt worker` exit 0 with an orderly log whatever the job is doing (before, during and after
its start, during an evaluation, during a checkpoint write), nothing aborts ("terminate called
without an active exception"), and the run goes back to the queue with its last checkpoint, to be
finished by the next start. Real processes throughout.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import httpx
import pytest

from tinygpt.checkpoint import read_checkpoint

from .service_helpers import (
    AppServer,
    Home,
    Proc,
    Serve,
    Worker,
    create,
    free_port,
    make_home,
    read_events,
    wait_for,
)
from .test_faults import job_pid, out_dir

ABORT = "terminate called"


def stop_with(proc: Proc, sig: int = signal.SIGTERM) -> int:
    proc.signal(sig)
    code = proc.popen.wait(120)
    proc.stop()
    assert ABORT not in proc.output(), proc.output()[-2000:]
    return code


def wait_until_caught(home: Home, run_id: int, log: Proc, frame: str) -> None:
    """Ask the job where it is (``kill -USR1``: faulthandler writes its stack to the log) until its
    stack shows ``frame``."""
    pid = wait_for(lambda: job_pid(home, run_id), timeout=120, message="the job's pid")
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        seen = len(log.output())
        os.kill(pid, signal.SIGUSR1)
        time.sleep(0.03)  # not faster: a dump from the signal handler now and then crashes a job in native code
        if f"in {frame}" in log.output()[seen:]:
            return
    pytest.fail(f"never caught the job in {frame}")


def assert_requeued_with_its_checkpoint(home: Home, run_id: int) -> None:
    """Read from the database itself, with nothing running (a next start would claim the run at once)."""
    from app.db import session_scope
    from app.models import Run
    from app.settings import Settings

    with session_scope(Settings(home=home.path, database_url=home.extra_env.get("TINYGPT_DATABASE_URL"))) as s:
        run = s.get(Run, run_id)
        assert run.status == "queued", (run.status, run.error)
        if run.last_step > 0:  # the resume point: saved as it stopped (logged rows may lag it by < log_every)
            assert read_checkpoint(out_dir(home, run_id) / "last.pt")["step"] >= run.last_step


def assert_finished_by_the_next_start(url: str, client: httpx.Client, run_id: int, steps: int) -> None:
    read_events(f"{url}/api/runs/{run_id}/events", timeout=300)
    run = client.get(f"/api/runs/{run_id}").json()
    assert run["status"] == "succeeded" and run["last_step"] == steps, run
    metric_steps = [m["step"] for m in client.get(f"/api/runs/{run_id}/metrics").json()]
    assert metric_steps == sorted(set(metric_steps)) and metric_steps[-1] == steps  # none twice


# -- `tinygpt serve` stopped while its worker is starting, or running, a job ----------------------
def before_the_job_starts(home: Home, client: httpx.Client, run_id: int, serve: Serve) -> None:
    pass  # at once: the worker has not claimed the run yet, or is only just starting its job


def while_the_job_starts(home: Home, client: httpx.Client, run_id: int, serve: Serve) -> None:
    """The reported abort: 0.1-0.3 s after the job was started."""
    wait_for(lambda: client.get(f"/api/runs/{run_id}").json()["status"] == "running", timeout=60, message="claimed")
    time.sleep(0.2)


def after_the_job_started(home: Home, client: httpx.Client, run_id: int, serve: Serve) -> None:
    wait_for(lambda: client.get(f"/api/runs/{run_id}").json()["last_step"] >= 3, timeout=120, message="step 3")


MOMENTS: list[Callable] = [
    pytest.param(before_the_job_starts, marks=pytest.mark.slow),  # 21 s each on 2 cores: all in the slow suite
    pytest.param(while_the_job_starts, marks=pytest.mark.slow),
    pytest.param(after_the_job_started, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("moment", MOMENTS, ids=lambda m: m.__name__)
def test_serve_stops_cleanly_and_the_run_resumes(tmp_path, slice_path, warm_cache, moment):
    home = make_home(tmp_path, slice_path, warm_cache)
    serve = Serve(home)
    with serve.client() as c:
        run = create(c, steps=30, eval_every=6)  # long enough that the stop lands before its end
        moment(home, c, run["id"], serve)
    assert stop_with(serve) == 0
    assert "Finished server process" in serve.output() and "stopped" in serve.output()
    assert_requeued_with_its_checkpoint(home, run["id"])
    again = Serve(home)
    try:
        with again.client() as c:
            assert_finished_by_the_next_start(again.url, c, run["id"], 30)
    finally:
        assert again.stop() == 0


# -- `tinygpt worker` stopped in the middle of an evaluation, and of a checkpoint write -------------
@pytest.mark.slow
@pytest.mark.parametrize("frame", ["estimate_loss", "save_checkpoint"])
def test_worker_stops_cleanly_mid_evaluation_and_mid_checkpoint(tmp_path, slice_path, warm_cache, frame):
    """The holmes preset: its 70 MB checkpoints and 20-batch evaluations last long enough to be caught."""
    home = make_home(tmp_path, slice_path, warm_cache)
    app, worker = AppServer(home), Worker(home, None, log_name="first")
    try:
        with app.client() as c:
            run = create(c, preset="holmes", steps=9, eval_every=3, batch_size=2)
            wait_for(lambda: c.get(f"/api/runs/{run['id']}").json()["last_step"] >= 1, timeout=180, message="step 1")
            wait_until_caught(home, run["id"], worker, frame)
            assert stop_with(worker) == 0
            assert "worker" in worker.output() and "stopped" in worker.output().splitlines()[-1]
            assert_requeued_with_its_checkpoint(home, run["id"])
            worker = Worker(home, None, log_name="second")
            assert_finished_by_the_next_start(app.url, c, run["id"], 9)
    finally:
        worker.stop()
        app.stop()


# -- `tinygpt app` and `tinygpt worker` stopped while they start, and Ctrl-C ------------------------
def started(proc: Proc, command: str) -> bool:
    """The app answers (and is warming its preset cache: torch at work in a thread), or the worker serves."""
    if command == "worker":
        return "serving devices" in proc.output()
    try:
        return httpx.get(f"http://127.0.0.1:{proc.port}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize("command", ["app", "worker"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)],
                         ids=["SIGTERM", "Ctrl-C"])
@pytest.mark.parametrize("when", ["importing", "just-started"])
def test_app_and_worker_stopped_while_starting_exit_zero(tmp_path, slice_path, command, sig, when):
    home = Home(tmp_path, slice_path)
    port = free_port()
    args = ["app", "--port", str(port)] if command == "app" else ["worker", "--devices", "cpu"]
    proc = Proc(args, home, command)
    proc.port = port
    if when == "importing":
        time.sleep(0.5)
    else:
        wait_for(lambda: started(proc, command), timeout=60, interval=0.02, message=f"{command} to start")
    assert stop_with(proc, sig) == 0, proc.output()
