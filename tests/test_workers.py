"""Several workers: each has its own identity, a name in use is refused, and a run is taken from its
worker only when that worker is provably gone, never because another worker started.

Real processes (app, workers, jobs) on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from .service_helpers import ROOT, AppServer, Worker, crash_worker, create, make_home, read_events, wait_for


def status_history(app: AppServer, run_id: int) -> list[str]:
    events = read_events(f"{app.url}/api/runs/{run_id}/events", timeout=300)
    return [e["data"]["status"] for e in events if e["event"] == "status"]


@pytest.mark.slow  # 63 s on 2 cores (the default suite keeps test_two_workers_never_take_the_same_run)
def test_more_workers_on_one_machine_never_take_a_healthy_run(tmp_path, slice_path, warm_cache, database_faults):
    """The reported bug: a second `tinygpt worker` on the same machine took the first one's run for
    crashed and started it again. Now two more workers start, one after another, while a run trains."""
    home = make_home(tmp_path, slice_path, warm_cache, **database_faults)
    app = AppServer(home)
    workers = [Worker(home, None, log_name="first")]
    try:
        with app.client() as c:
            # long enough to be training while two more workers start (each imports, registers, polls)
            run = create(c, steps=400, eval_every=200)
            wait_for(lambda: c.get(f"/api/runs/{run['id']}").json()["last_step"] >= 5, timeout=120, message="step 5")
            for name in ("second", "third"):
                workers.append(Worker(home, None, log_name=name))
                wait_for(lambda: "serving devices" in workers[-1].output(), timeout=60, message=f"the {name} worker")
                time.sleep(1)  # a few of its polls, while the run trains
            assert c.get(f"/api/runs/{run['id']}").json()["status"] == "running"  # still training meanwhile
            more = [create(c, steps=2, eval_every=2) for _ in range(2)]
            for r in [run, *more]:
                assert status_history(app, r["id"]) == ["running", "succeeded"]  # claimed once, never crashed
                final = c.get(f"/api/runs/{r['id']}").json()
                assert final["attempt"] == 1 and final["worker"]["host"] == socket.gethostname()
            names = {c.get(f"/api/runs/{r['id']}").json()["worker"]["name"] for r in [run, *more]}
            assert all(n.startswith(f"{socket.gethostname()}:") for n in names)  # the default names: HOST:PID
        for w in workers:
            assert "crashed" not in w.output()
    finally:
        for w in workers:
            w.stop()
        app.stop()


def test_a_name_held_by_a_live_worker_is_refused(tmp_path, slice_path, warm_cache, database_faults):
    home = make_home(tmp_path, slice_path, warm_cache, **database_faults)
    first = Worker(home, "lab")
    try:
        wait_for(lambda: "serving devices" in first.output(), timeout=60, message="the first worker")
        second = subprocess.run([sys.executable, "-m", "app.cli", "worker", "--devices", "cpu", "--name", "lab"],
                                cwd=ROOT, env=home.env(), capture_output=True, text=True, timeout=60)
        assert second.returncode == 2
        assert second.stderr.strip().splitlines()[-1] == (
            f"tinygpt worker: error: worker name 'lab' is in use by a live worker (pid {first.popen.pid} on "
            f"{socket.gethostname()}); stop it first, or give this one another --name")
    finally:
        assert first.stop() == 0
    again = Worker(home, "lab")  # stopped: the name is free again
    try:
        wait_for(lambda: "serving devices" in again.output(), timeout=60, message="the name taken again")
    finally:
        again.stop()


@pytest.mark.slow  # 35 s: `make test-slow` (CI runs it); the SIGKILL fault tests recover under the same name
def test_the_runs_of_a_killed_worker_are_recovered_by_another_at_once(tmp_path, slice_path, warm_cache, database_faults):
    """Its process is gone on this host: no need to wait for a stale heartbeat (set to 10 minutes here)."""
    home = make_home(tmp_path, slice_path, warm_cache, TINYGPT_STALE_AFTER_SEC="600", **database_faults)
    app = AppServer(home)
    doomed = Worker(home, None, log_name="doomed")
    rescuer = None
    try:
        with app.client() as c:
            run = create(c, steps=60, eval_every=20)
            wait_for(lambda: c.get(f"/api/runs/{run['id']}").json()["last_step"] >= 25, timeout=120, message="step 25")
            crash_worker(doomed, home, run["id"])  # the job dies with it: nothing re-queues the run but the rescuer
            rescuer = Worker(home, None, log_name="rescuer")
            assert status_history(app, run["id"]) == ["running", "crashed", "queued", "running", "succeeded"]
            final = c.get(f"/api/runs/{run['id']}").json()
            assert final["attempt"] == 2 and final["last_step"] == 60
            assert final["worker"]["name"] == f"{socket.gethostname()}:{rescuer.popen.pid}"
    finally:
        doomed.stop()
        if rescuer:
            rescuer.stop()
        app.stop()


def children(pid: int) -> list[tuple[int, str]]:
    """The child processes of ``pid``, with their command lines."""
    found = []
    for child in open(f"/proc/{pid}/task/{pid}/children").read().split():
        try:
            found.append((int(child), open(f"/proc/{child}/cmdline").read().replace("\0", " ")))
        except FileNotFoundError:
            pass  # exited meanwhile
    return found


def warm_pids(worker: Worker) -> list[int]:
    return [pid for pid, cmd in children(worker.popen.pid) if cmd.endswith("worker.warm ")]


def test_a_run_starts_in_the_warm_job_process_and_the_next_one_warms_up(tmp_path, slice_path, warm_cache):
    """Each device slot keeps one job process started ahead; a claimed run is handed to it (the same
    pid trains the run), and a new warm one starts; stopping the worker leaves none behind."""
    home = make_home(tmp_path, slice_path, warm_cache, TINYGPT_WARM_JOBS="true")
    app, worker = AppServer(home), Worker(home, "warm")
    try:
        wait_for(lambda: len(warm_pids(worker)) == 1, timeout=30, message="a warm job process")
        [ready] = warm_pids(worker)
        with app.client() as c:
            run = create(c, steps=5, eval_every=5)
            read_events(f"{app.url}/api/runs/{run['id']}/events", timeout=120)
            assert c.get(f"/api/runs/{run['id']}").json()["status"] == "succeeded"
        assert f"run {run['id']} (attempt 1) started on cpu, pid {ready}" in worker.output()
        wait_for(lambda: len(warm_pids(worker)) == 1 and warm_pids(worker) != [ready], timeout=30,
                 message="the next warm job process")
        [following] = warm_pids(worker)
    finally:
        assert worker.stop() == 0
        app.stop()
    with pytest.raises(ProcessLookupError):
        import os

        os.kill(following, 0)  # the warm process exited with its worker


#: A warm job process's waiting, alone: what it was handed, its session's nice value once handed a run, and
#: whether it finished preparing (imports, schema, torch's first use). ``--no-session``: as on a kernel that
#: does not schedule by session.
HANDED = """
import sys
from pathlib import Path
from worker import warm
if sys.argv[1:] == ["--no-session"]:
    warm.SESSION_PRIORITY = Path("/proc/self/no-such-file")
run = warm.handed_run()
session = open("/proc/self/autogroup").read().split()[-1] if warm.SESSION_PRIORITY.exists() else "-"
print(run, session, warm.prepared.is_set())
"""


def thread_nice(pid: int) -> dict[int, int]:
    """Each thread of ``pid``: its nice value (field 19 of its stat line)."""
    from pathlib import Path

    nice = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            nice[int(task.name)] = int((task / "stat").read_text().rsplit(")", 1)[1].split()[16])
        except FileNotFoundError:
            pass  # the thread ended meanwhile
    return nice


def warm_job(home, *args: str) -> subprocess.Popen:  # noqa: ANN001
    return subprocess.Popen([sys.executable, "-c", HANDED, *args], cwd=ROOT, env=home.env(), text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)


@pytest.mark.skipif(not os.path.exists("/proc/self/autogroup"), reason="the kernel does not schedule by session")
def test_a_warm_job_prepares_at_the_lowest_priority_and_trains_at_its_own(tmp_path, slice_path, warm_cache):
    """Where the kernel shares the CPU between sessions (autogroup), a warm job's session waits at nice 19, so
    that its imports give way to the run training beside it; the run it is handed gets nice 0 back."""
    home = make_home(tmp_path, slice_path, warm_cache)
    job = warm_job(home)
    wait_for(lambda: open(f"/proc/{job.pid}/autogroup").read().split()[-1] == "19", timeout=10,
             message="the warm job's session at nice 19")
    out, _ = job.communicate("7 2\n", timeout=120)
    assert out.strip() == "['7', '2'] 0 True"


def test_without_sessions_only_the_warm_up_thread_gives_way(tmp_path, slice_path, warm_cache):
    """Where a nice value counts across sessions, the warm-up thread takes nice 19 and the main thread, which
    runs the run, keeps its own; stdin closed without a run: none."""
    home = make_home(tmp_path, slice_path, warm_cache)
    job = warm_job(home, "--no-session")
    wait_for(lambda: 19 in thread_nice(job.pid).values(), timeout=10, message="a thread at nice 19")
    assert thread_nice(job.pid)[job.pid] == 0
    out, _ = job.communicate("", timeout=60)
    assert out.strip().startswith("None -")
