"""Known answers for worker liveness (worker/registry.py): when a worker is provably gone, and when it
still holds its name. Real processes stand for live, dead and zombie workers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta

import pytest

from app.models import WorkerRecord, utcnow
from worker.registry import is_gone, is_live, process_alive

HOST = "this-host"


def record(pid: int, *, host: str = HOST, name: str = "w", stopped: bool = False, beat_ago: float = 0) -> WorkerRecord:
    return WorkerRecord(name=name, host=host, pid=pid, heartbeat_at=utcnow() - timedelta(seconds=beat_ago),
                        stopped_at=utcnow() if stopped else None)


@pytest.fixture
def processes():
    """A live process, a dead one (waited for) and a zombie (dead, not waited for)."""
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while open(f"/proc/{zombie.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline, "the child never exited"
        time.sleep(0.01)
    yield {"live": live.pid, "dead": dead.pid, "zombie": zombie.pid}
    live.kill()
    live.wait()
    zombie.wait()


def test_process_alive(processes):
    assert process_alive(processes["live"]) is True
    assert process_alive(processes["dead"]) is False
    assert process_alive(processes["zombie"]) is False
    assert process_alive(os.getpid()) is True


@pytest.mark.parametrize("case, gone", [
    ("live on this host", False),
    ("dead on this host", True),
    ("zombie on this host", True),
    ("stopped", True),
    ("dead on another host", False),  # its pid says nothing here: only its heartbeat can tell
    ("this process under another name", True),  # a restarted container: pids start over
    ("myself", False),
])
def test_is_gone(processes, case, gone):
    rec = {
        "live on this host": record(processes["live"]),
        "dead on this host": record(processes["dead"]),
        "zombie on this host": record(processes["zombie"]),
        "stopped": record(processes["live"], stopped=True),
        "dead on another host": record(processes["dead"], host="elsewhere"),
        "this process under another name": record(os.getpid(), name="old"),
        "myself": record(os.getpid(), name="me"),
    }[case]
    assert is_gone(rec, host=HOST, me="me") is gone


@pytest.mark.parametrize("host, beat_ago, live", [
    (HOST, 3600, True),  # on this host its process decides, however old its heartbeat
    ("elsewhere", 5, True),
    ("elsewhere", 30, False),
])
def test_is_live_holds_the_name(processes, host, beat_ago, live):
    assert is_live(record(processes["live"], host=host, beat_ago=beat_ago), host=HOST, stale_after_sec=10) is live
