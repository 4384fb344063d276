"""Real processes for the service tests: the app (uvicorn) and workers, on a temporary home."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Home:
    """A TINYGPT_HOME with its environment for child processes."""

    path: Path
    corpus: Path
    extra_env: dict = field(default_factory=dict)

    def env(self) -> dict:
        return {
            **os.environ,
            "TINYGPT_HOME": str(self.path),
            "TINYGPT_HOLMES_PATH": str(self.corpus),
            "TINYGPT_HEARTBEAT_SEC": "0.5",
            "TINYGPT_STALE_AFTER_SEC": "4",
            "TINYGPT_WORKER_POLL_SEC": "0.2",
            "TINYGPT_EVENT_POLL_SEC": "0.05",
            # tests that read a run's whole stream after it ended keep its metric events; the window's own
            # tests (tests/test_long_runs.py) set a short one
            "TINYGPT_EVENT_WINDOW_SEC": "3600",
            "PYTHONUNBUFFERED": "1",
            # warm job processes cost each worker a process importing torch; the tests of the default
            # (tests/test_service.py, test_sweeps.py, the warm test in test_workers.py) turn them on
            "TINYGPT_WARM_JOBS": "false",
            **self.extra_env,
        }

    def seed_cache(self, cache: Path) -> None:
        """Reuse tokenizers/encoded corpora trained once per test session."""
        shutil.copytree(cache, self.path / "cache", dirs_exist_ok=True)


class Proc:
    def __init__(self, args: list[str], home: Home, log_name: str) -> None:
        self.home = home
        self.log_path = home.path / f"{log_name}.log"
        self.log = open(self.log_path, "w")  # noqa: SIM115
        self.popen = subprocess.Popen([sys.executable, "-m", "app.cli", *args], cwd=ROOT, env=home.env(),
                                      stdout=self.log, stderr=subprocess.STDOUT)

    def signal(self, sig: int) -> None:
        self.popen.send_signal(sig)

    def stop(self, timeout: float = 60) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self.log.close()
        return self.popen.returncode

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text()


class AppServer(Proc):
    def __init__(self, home: Home, port: int | None = None) -> None:
        self.port = port or free_port()
        super().__init__(["app", "--port", str(self.port)], home, f"app-{self.port}")
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"app exited:\n{self.output()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"app did not start:\n{self.output()}")

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30)


class Worker(Proc):
    """A ``tinygpt worker``; without a name it takes the default (``HOST:PID``)."""

    def __init__(self, home: Home, name: str | None, devices: str = "cpu", log_name: str | None = None) -> None:
        args = ["worker", "--devices", devices] + (["--name", name] if name else [])
        super().__init__(args, home, f"worker-{log_name or name}")


def read_events(url: str, *, last_event_id: int | None = None, timeout: float = 120, until_end: bool = True,
                stop_after: int | None = None, headers: dict | None = None) -> list[dict]:
    """Read an SSE stream into a list of {id, event, data}; stops at 'end' (or after stop_after events)."""
    headers = {**(headers or {}), **({"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {})}
    events: list[dict] = []
    current: dict = {}
    deadline = time.monotonic() + timeout
    with httpx.stream("GET", url, headers=headers, timeout=httpx.Timeout(timeout, connect=5)) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if time.monotonic() > deadline:
                raise TimeoutError(f"stream did not end in {timeout} s; got {events[-3:]}")
            if line == "":
                if "event" in current or "data" in current:
                    current.setdefault("event", "message")
                    current["data"] = json.loads(current.get("data", "null"))
                    events.append(current)
                    if until_end and current["event"] == "end":
                        return events
                    if stop_after is not None and len(events) >= stop_after:
                        return events
                current = {}
            elif line.startswith(":"):
                continue
            else:
                key, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if key == "id":
                    current["id"] = int(value)
                elif key == "data":
                    current["data"] = current.get("data", "") + value
                elif key == "event":
                    current["event"] = value
    return events


def wait_for(predicate, timeout: float = 60, interval: float = 0.1, message: str = "condition"):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out waiting for {message}")
