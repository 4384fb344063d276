"""Real processes for the service tests: the app (uvicorn) and workers, on a temporary home."""

from __future__ import annotations

import contextlib
import importlib
import io
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
from unittest import mock

import httpx
import pytest

from worker.registry import process_alive

ROOT = Path(__file__).resolve().parent.parent
TINY = {"preset": "tiny", "device": "cpu", "precision": "fp32", "batch_size": 4, "seed": 7, "eval_batches": 2, "threads": 1}  # a run in seconds


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


def start_tinygpt(*args: object, env: dict | None = None, module: str = "app.cli", cwd: Path = ROOT,
                  **popen: object) -> subprocess.Popen:
    """The ``tinygpt`` command as a process: the installed one (``app.cli``: the library's commands plus the
    dashboard's), or the library alone (``module="tinygpt"``); ``env`` default: this process's."""
    return subprocess.Popen([sys.executable, "-m", module, *map(str, args)], cwd=cwd,
                            env=os.environ.copy() if env is None else env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **popen)


def run_tinygpt(*args: object, env: dict | None = None, module: str = "app.cli", cwd: Path = ROOT,
                timeout: float = 300, check: bool = False) -> subprocess.CompletedProcess:
    """:func:`start_tinygpt` to its end; ``check``: fail the test on a non-zero exit, showing its output."""
    return finished(start_tinygpt(*args, env=env, module=module, cwd=cwd), timeout=timeout, check=check)


def finished(proc: subprocess.Popen, *, timeout: float = 300, check: bool = False) -> subprocess.CompletedProcess:
    """A :func:`start_tinygpt` process waited for (killed past ``timeout``), as :func:`run_tinygpt` returns it."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return checked(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), check)


def checked(done: subprocess.CompletedProcess, check: bool) -> subprocess.CompletedProcess:
    """``done``; with ``check``, a failed test on a non-zero exit, showing the command's output."""
    if check and done.returncode != 0:
        raise AssertionError(f"exit {done.returncode}\nstdout: {done.stdout}\nstderr: {done.stderr}")
    return done


def tinygpt_here(*args: object, env: dict | None = None, module: str = "app.cli", cwd: Path | None = None,
                 check: bool = False) -> subprocess.CompletedProcess:
    """The ``tinygpt`` command run inside the test process, for what is not about processes (argument errors,
    one-line messages, printed tables): a process would spend seconds starting. ``env`` replaces the
    environment while it runs; exit code, stdout and stderr come back (and ``check``) as from :func:`run_tinygpt`."""
    import torch

    from app.settings import get_settings

    main = importlib.import_module(module).main
    out, err = io.StringIO(), io.StringIO()
    threads = torch.get_num_threads()
    with contextlib.ExitStack() as stack:
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        stack.enter_context(contextlib.chdir(cwd or Path.cwd()))
        stack.enter_context(mock.patch.dict(os.environ, env or {}, clear=env is not None))
        stack.callback(torch.set_num_threads, threads)  # `--threads` sets them for the whole process
        stack.callback(get_settings.cache_clear)
        get_settings.cache_clear()
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse's errors
            code = exc.code if isinstance(exc.code, int) else 1
    return checked(subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue()), check)


def make_home(tmp_path: Path, slice_path: Path, warm_cache: Path, **extra_env: object) -> Home:
    """A fresh home under ``tmp_path`` whose caches (tokenizer, encoded corpus) are the session's."""
    home = Home(tmp_path / "home", slice_path, {k: str(v) for k, v in extra_env.items()})
    home.path.mkdir()
    home.seed_cache(warm_cache)
    return home


def create(client: httpx.Client, **body: object) -> dict:
    """A tiny run (TINY, then ``body``) through the API; its JSON."""
    response = client.post("/api/runs", json={**TINY, **body})
    assert response.status_code == 201, response.text
    return response.json()[0]


def run_status(client: httpx.Client, run_id: int) -> str:
    return client.get(f"/api/runs/{run_id}").json()["status"]


def engine_independent(home: Home) -> None:
    """Skip the PostgreSQL run of a test whose subject does not touch the database engine."""
    if "TINYGPT_DATABASE_URL" in home.extra_env:
        pytest.skip("does not depend on the database engine: run on SQLite only")


class Proc:
    """A ``tinygpt`` service command: this checkout's (``python -m app.cli``), or ``command`` (an installed
    ``tinygpt``) started in ``cwd``."""

    def __init__(self, args: list[str], home: Home, log_name: str, command: list[str] | None = None,
                 cwd: Path = ROOT) -> None:
        self.home = home
        self.log_path = home.path / f"{log_name}.log"
        self.log = open(self.log_path, "w")  # noqa: SIM115
        self.popen = subprocess.Popen([*(command or [sys.executable, "-m", "app.cli"]), *args], cwd=cwd,
                                      env=home.env(), stdout=self.log, stderr=subprocess.STDOUT)

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


class Serve(Proc):
    """`tinygpt serve`: the app and its own worker."""

    def __init__(self, home: Home, *args: str, command: list[str] | None = None, cwd: Path = ROOT) -> None:
        self.port = free_port()
        super().__init__(["serve", "--port", str(self.port), *args], home, f"serve-{self.port}", command, cwd)
        self.url = f"http://127.0.0.1:{self.port}"
        wait_for(lambda: self.answers(), timeout=60, message="tinygpt serve to answer")

    def answers(self) -> bool:
        if self.popen.poll() is not None:
            raise RuntimeError(f"serve exited:\n{self.output()}")
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30)


class Worker(Proc):
    """A ``tinygpt worker``; without a name it takes the default (``HOST:PID``)."""

    def __init__(self, home: Home, name: str | None, devices: str = "cpu", log_name: str | None = None) -> None:
        args = ["worker", "--devices", devices] + (["--name", name] if name else [])
        super().__init__(args, home, f"worker-{log_name or name}")


def job_pid(home: Home, run_id: int) -> int | None:
    """The pid of the job training ``run_id`` (from the database: SQLite or PostgreSQL alike)."""
    from app.db import session_scope
    from app.models import Run
    from app.settings import Settings

    with session_scope(Settings(home=home.path, database_url=home.extra_env.get("TINYGPT_DATABASE_URL"))) as s:
        return s.get(Run, run_id).pid


def crash_worker(worker: Worker, home: Home, run_id: int) -> None:
    """The machine dies under a worker and the job training ``run_id``: both end at once, the job with no chance to
    checkpoint (a worker killed alone has its jobs stop at a step boundary: worker/parent.py). The worker is
    stopped first, so that it cannot see its job die and record it."""
    pid = job_pid(home, run_id)
    worker.signal(signal.SIGSTOP)
    try:
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: not process_alive(pid), timeout=10, interval=0.01, message=f"job {pid} to die")
    finally:
        worker.signal(signal.SIGKILL)
        worker.popen.wait()


@dataclass
class Service:
    """A home with its app and workers (tests/conftest.py, ``start_service``)."""

    home: Home
    app: AppServer
    workers: list[Worker]

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.app.stop()


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
