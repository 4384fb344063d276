"""Faults injected into real processes: nothing recorded is lost, every run ends in a true state.

- the machine dying under a worker and its job (both SIGKILLed) during a training step, during an evaluation and
  in the middle of writing a checkpoint: the run is marked crashed within 5 s of the worker's return, resumes from
  its last complete checkpoint, and ends with the same losses as an uninterrupted run of its seed;
- a job out of memory, a corrupt checkpoint to resume from, a full disk, a database locked for
  seconds: each ends in a clear state while the worker goes on serving.

Slow (about 5 minutes on 2 cores): `make test-slow` runs them, and CI does.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from tinygpt.checkpoint import read_checkpoint

from .service_helpers import (
    AppServer,
    Home,
    Worker,
    crash_worker,
    create,
    job_pid,
    make_home,
    read_events,
    run_status,
    wait_for,
)

pytestmark = pytest.mark.slow

# one training thread: the same seed gives bit-for-bit the same losses, run after run
RECIPE = {"steps": 60, "eval_every": 20, "batch_size": 8, "threads": 1, "seed": 11}


def out_dir(home: Home, run_id: int) -> Path:
    return home.path / "runs" / str(run_id)


def losses(client, run_id: int) -> dict[int, tuple[float, float | None]]:
    return {m["step"]: (m["train_loss"], m["val_loss"]) for m in client.get(f"/api/runs/{run_id}/metrics").json()}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, slice_path, warm_cache) -> dict[int, tuple[float, float | None]]:
    """The metrics of RECIPE run once without faults: what every resumed run must end with."""
    home = make_home(tmp_path_factory.mktemp("reference"), slice_path, warm_cache)
    app, worker = AppServer(home), Worker(home, "reference")
    try:
        with app.client() as c:
            run = create(c, **RECIPE)
            read_events(f"{app.url}/api/runs/{run['id']}/events", timeout=300)
            assert run_status(c, run["id"]) == "succeeded"
            return losses(c, run["id"])
    finally:
        worker.stop()
        app.stop()


# -- where the kill lands ---------------------------------------------------------------------------
def kill_during_a_step(home: Home, client, run_id: int, worker: Worker) -> None:
    wait_for(lambda: client.get(f"/api/runs/{run_id}").json()["last_step"] >= 30, timeout=180, message="step 30")
    crash_worker(worker, home, run_id)


def kill_during_evaluation(home: Home, client, run_id: int, worker: Worker) -> None:
    """Once the step-20 checkpoint is on disk, ask the job where it is (``kill -USR1``: faulthandler
    writes its stack to the worker's log) until the stack shows an evaluation, then kill the worker
    there. The disk, not the API, says when to start: the API's last step may trail the job."""
    wait_for(lambda: (out_dir(home, run_id) / "last.pt").exists(), timeout=180, message="step-20 checkpoint")
    pid = job_pid(home, run_id)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        seen = len(worker.output())
        try:
            os.kill(pid, signal.SIGUSR1)
        except ProcessLookupError:
            pytest.fail(f"the job (pid {pid}) ended before it was caught evaluating")
        time.sleep(0.02)
        dump = worker.output()[seen:]
        if "in estimate_loss" in dump:
            crash_worker(worker, home, run_id)
            return
    pytest.fail("never caught the job evaluating")


def kill_while_writing_a_checkpoint(home: Home, client, run_id: int, worker: Worker) -> None:
    """The step-40 checkpoints are written into pipes that this test reads only partly: the job
    is blocked half-way through writing when the worker is killed."""
    wait_for(lambda: client.get(f"/api/runs/{run_id}").json()["last_step"] >= 20, timeout=180, message="step 20")
    folder = out_dir(home, run_id)
    wait_for(lambda: (folder / "last.pt").exists(), timeout=60, message="step-20 checkpoint")
    pipes = [folder / ".best.pt.tmp", folder / ".last.pt.tmp"]
    for pipe in pipes:
        os.mkfifo(pipe)
    writing = threading.Event()

    def read_part(pipe: Path) -> None:
        with open(pipe, "rb") as f:  # returns once the job opens the pipe to write its checkpoint
            f.read(100_000)
            writing.set()
            writing.wait()
            time.sleep(30)  # hold it open, unread: the job stays blocked mid-write until it is killed

    readers = [threading.Thread(target=read_part, args=(p,), daemon=True) for p in pipes]
    for r in readers:
        r.start()
    assert writing.wait(180), "the job never started writing the step-40 checkpoint"
    crash_worker(worker, home, run_id)
    time.sleep(0.5)
    for pipe in pipes:
        pipe.unlink()  # the next attempt writes real files again


@pytest.mark.parametrize("kill", [kill_during_a_step, kill_during_evaluation, kill_while_writing_a_checkpoint],
                         ids=["step", "evaluation", "checkpoint"])
def test_worker_killed_then_run_resumes_with_the_losses_of_an_uninterrupted_run(
        tmp_path, slice_path, warm_cache, uninterrupted, kill):
    home = make_home(tmp_path, slice_path, warm_cache)
    app, worker = AppServer(home), Worker(home, "w1")
    try:
        with app.client() as c:
            run = create(c, **RECIPE)
            kill(home, c, run["id"], worker)
            worker.popen.wait()
            before = losses(c, run["id"])
            last_checkpoint = read_checkpoint(out_dir(home, run["id"]) / "last.pt")["step"]
            if kill is kill_while_writing_a_checkpoint:
                assert last_checkpoint == 20  # the half-written step-40 one never took its place
            worker = Worker(home, "w1")
            returned = time.monotonic()
            wait_for(lambda: c.get(f"/api/runs/{run['id']}").json()["attempt"] == 2, timeout=30, message="re-claimed")
            assert time.monotonic() - returned < 5
            events = read_events(f"{app.url}/api/runs/{run['id']}/events", timeout=300)
            statuses = [e["data"]["status"] for e in events if e["event"] == "status"]
            assert statuses == ["running", "crashed", "queued", "running", "succeeded"]
            logs = [e["data"]["message"] for e in events if e["event"] == "log"]
            resumed = [m for m in logs if m.startswith("resumed at step")]
            assert len(resumed) == 1 and resumed[0].startswith(f"resumed at step {last_checkpoint} ")
            after = losses(c, run["id"])
            assert sorted(after) == sorted(uninterrupted)  # every step logged once, none missing
            assert set(before) <= set(after)  # what was logged before the kill is still there
            for step, (train, val) in uninterrupted.items():
                assert after[step][0] == pytest.approx(train, abs=1e-6), step
                assert after[step][1] == pytest.approx(val, abs=1e-6) if val is not None else after[step][1] is None
            assert not list(out_dir(home, run["id"]).glob(".*.tmp"))
    finally:
        worker.stop()
        app.stop()


# -- jobs that cannot go on -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def capped(tmp_path_factory, slice_path, warm_cache):
    """One app and worker whose jobs may use 3 GB of address space, for the faults below."""
    home = make_home(tmp_path_factory.mktemp("faults"), slice_path, warm_cache, TINYGPT_JOB_MEMORY_MB=3000)
    app, worker = AppServer(home), Worker(home, "faults")
    yield home, app, worker
    worker.stop()
    app.stop()


def make_symlink(link: Path, target: str) -> bool:
    """False while the job is writing a file by that name (it renames it away when done)."""
    try:
        link.symlink_to(target)
        return True
    except FileExistsError:
        return False


def assert_worker_still_serves(app: AppServer, client) -> None:
    ok = create(client, steps=5, eval_every=5)
    read_events(f"{app.url}/api/runs/{ok['id']}/events", timeout=120)
    assert run_status(client, ok["id"]) == "succeeded"


def test_a_job_out_of_memory_fails_saying_so(capped):
    """A run the estimate lets through (it is a lower bound) that needs more address space than the cap:
    it fails saying so. One far past the cap is refused when it is submitted (tests/test_security.py)."""
    home, app, _ = capped
    with app.client() as c:
        assert c.post("/api/runs", json={"preset": "tiny", "batch_size": 4096}).status_code == 422
        run = create(c, steps=5, batch_size=300, preset="tiny")
        read_events(f"{app.url}/api/runs/{run['id']}/events", timeout=120)
        final = c.get(f"/api/runs/{run['id']}").json()
        assert final["status"] == "failed"
        assert final["error"].startswith("out of memory on cpu at batch_size 300: ")
        assert final["error"].endswith("(try a smaller batch_size, or gradient accumulation)")
        assert_worker_still_serves(app, c)


def test_a_corrupt_checkpoint_on_resume_fails_naming_the_file(tmp_path, slice_path, warm_cache):
    home = make_home(tmp_path, slice_path, warm_cache)
    app, worker = AppServer(home), Worker(home, "w1")
    try:
        with app.client() as c:
            run = create(c, steps=100_000, eval_every=10)
            last = out_dir(home, run["id"]) / "last.pt"
            wait_for(lambda: last.exists(), timeout=120, message="a checkpoint")
            assert worker.stop() == 0  # the run goes back to the queue, to resume from last.pt
            assert run_status(c, run["id"]) == "queued"
            last.write_bytes(b"PK\x03\x04 not really a checkpoint" * 100)
            worker = Worker(home, "w2")
            events = read_events(f"{app.url}/api/runs/{run['id']}/events", timeout=120)
            final = c.get(f"/api/runs/{run['id']}").json()
            assert [e["data"]["status"] for e in events if e["event"] == "status"][-2:] == ["running", "failed"]
            assert final["status"] == "failed" and final["attempt"] == 2
            assert f"{last} is not a readable checkpoint" in final["error"]
            assert_worker_still_serves(app, c)
    finally:
        worker.stop()
        app.stop()


def test_a_full_disk_while_checkpointing_fails_and_keeps_the_earlier_checkpoint(capped):
    home, app, _ = capped
    with app.client() as c:
        run = create(c, steps=100_000, eval_every=10)
        folder = out_dir(home, run["id"])
        wait_for(lambda: (folder / "best.pt").exists(), timeout=120, message="a checkpoint")
        for name in (".best.pt.tmp", ".last.pt.tmp"):  # every write there fails: No space left on device
            wait_for(lambda name=name: make_symlink(folder / name, "/dev/full"), timeout=30, interval=0.005, message=name)
        events = read_events(f"{app.url}/api/runs/{run['id']}/events", timeout=120)
        final = c.get(f"/api/runs/{run['id']}").json()
        assert final["status"] == "failed"
        assert final["error"].startswith("CheckpointError: could not write checkpoint ")
        assert final["error"].endswith(": No space left on device")
        assert events[-1]["event"] == "end"
        # the checkpoint written before the disk filled up still works
        assert final["best_step"] is not None
        response = c.post(f"/api/runs/{run['id']}/sample", json={"prompt": "Holmes", "max_tokens": 5, "seed": 1})
        assert response.status_code == 200 and "event: end" in response.text
        assert_worker_still_serves(app, c)


def test_a_database_locked_for_seconds_delays_but_loses_nothing(capped):
    home, app, _ = capped
    with app.client() as c:
        run = create(c, steps=80, eval_every=20)
        wait_for(lambda: c.get(f"/api/runs/{run['id']}").json()["last_step"] >= 10, timeout=120, message="step 10")
        db = sqlite3.connect(home.path / "tinygpt.db", isolation_level=None)
        db.execute("BEGIN EXCLUSIVE")  # no one else may write (or, in WAL mode, checkpoint) for 3 s
        time.sleep(3)
        db.execute("COMMIT")
        db.close()
        read_events(f"{app.url}/api/runs/{run['id']}/events", timeout=180)
        final = c.get(f"/api/runs/{run['id']}").json()
        assert final["status"] == "succeeded" and final["attempt"] == 1
        steps = [m["step"] for m in c.get(f"/api/runs/{run['id']}/metrics").json()]
        assert steps == [0, 10, 20, 30, 40, 50, 60, 70, 80]
