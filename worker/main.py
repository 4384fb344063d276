"""The worker process: claims queued runs and runs each in a child process, one per device slot.

    tinygpt worker [--devices cpu,cuda:0] [--name NAME]

Each worker registers under a name no other live worker holds (default ``HOST:PID``; see
``worker/registry.py``), and takes a run from another worker only when that one is provably gone.

A crash or out-of-memory in a job kills only its child. On SIGTERM (or Ctrl-C) the
worker asks its jobs to checkpoint, waits for them (they put their runs back in the
queue) and exits. On start-up it marks crashed the runs it owned before (their jobs
died with it) and any run whose heartbeat went stale, and re-queues those set to resume.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from sqlalchemy import update
from sqlmodel import col

from app.db import init_db, session_scope
from app.models import Run, RunStatus, utcnow
from app.services.lifecycle import change_status
from app.services.sweeps import settle_running_sweeps, settle_sweep
from app.settings import Settings, get_settings
from tinygpt.stop_signals import set_on_signals

from . import registry
from .notifier import Notifier
from .parent import end_with_parent
from .queue import claim_next, reap_dead_runs
from .stalls import check_stalls

log = logging.getLogger("worker")
SHUTDOWN_GRACE_SEC = 120


def default_devices() -> list[str]:
    """This machine's best device, when the worker is given none (the only time the worker imports torch: its jobs
    are processes of their own)."""
    from tinygpt.device import resolve_device

    device = resolve_device("auto")
    return [f"cuda:{device.index or 0}" if device.type == "cuda" else device.type]


@dataclass
class Slot:
    device: str
    run_id: int | None = None
    process: subprocess.Popen | None = None
    warm: subprocess.Popen | None = None  # the next job's process, started ahead: modules imported, waiting


JOB_COMMAND = [sys.executable, "-m", "worker.job"]
WARM_JOB_COMMAND = [sys.executable, "-m", "worker.warm"]


def signal_description(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def exit_outcome(rc: int, *, stopping: bool) -> tuple[RunStatus, str | None]:
    """What a job's exit means for its run when the job did not record an outcome itself."""
    if stopping and rc == -signal.SIGTERM:
        # this worker's SIGTERM landed before the job could handle it (while it started): back to the
        # queue, to resume from its last checkpoint
        return RunStatus.queued, None
    if rc < 0:
        name = signal_description(rc)
        status = RunStatus.crashed if name in ("SIGKILL", "SIGSEGV", "SIGBUS", "SIGABRT") else RunStatus.failed
        return status, f"job process killed by {name}" + (" (out of memory?)" if name == "SIGKILL" else "")
    return RunStatus.failed, f"job process exited with code {rc}"


class Worker:
    def __init__(self, settings: Settings, devices: list[str], name: str | None = None) -> None:
        self.settings = settings
        self.slots = [Slot(d) for d in devices]
        self.name = name or registry.default_name()
        self.host = registry.this_host()
        self.stopping = threading.Event()
        self.last_beat = 0.0
        self.last_settle = 0.0

    def start_job(self, slot: Slot, run: Run) -> None:
        """The run's job: the slot's warm process when it has one (handed the run on its stdin), else a
        fresh one; then the next warm process starts, importing while this run trains."""
        slot.process = self.hand_over(slot.warm, run) if slot.warm is not None else None
        if slot.process is None:
            cmd = [*JOB_COMMAND, str(run.id), str(run.attempt)]
            slot.process = subprocess.Popen(cmd, start_new_session=True)  # Ctrl-C reaches the worker only
        slot.warm = None
        slot.run_id = run.id
        log.info("run %s (attempt %s) started on %s, pid %s", run.id, run.attempt, slot.device, slot.process.pid)
        self.start_warm(slot)

    @staticmethod
    def hand_over(warm: subprocess.Popen, run: Run) -> subprocess.Popen | None:
        if warm.poll() is not None:
            return None  # it died waiting (killed from outside): start a fresh one
        try:
            warm.stdin.write(f"{run.id} {run.attempt}\n")
            warm.stdin.close()
        except BrokenPipeError:
            return None
        return warm

    def start_warm(self, slot: Slot) -> None:
        if self.settings.warm_jobs and not self.stopping.is_set():
            slot.warm = subprocess.Popen(WARM_JOB_COMMAND, stdin=subprocess.PIPE, text=True,
                                         start_new_session=True)

    def stop_warm(self) -> None:
        """Warm processes hold no run: ended at once (SIGTERM), not left to finish importing torch first."""
        for slot in self.slots:
            if slot.warm is not None:
                slot.warm.terminate()
                slot.warm.stdin.close()
                slot.warm.wait()
                slot.warm = None

    def reap_child(self, slot: Slot) -> None:
        """After a child exits: if it did not record an outcome itself, record one for it; a sweep's trial
        moves its sweep on (its next trial can take this slot at once)."""
        rc = slot.process.returncode
        with session_scope(self.settings) as s:
            run = s.get(Run, slot.run_id)
            log.info("run %s: job exited with %s; run is %s", slot.run_id, rc, run.status if run else "gone")
            if run is not None and run.status == RunStatus.running and run.worker == self.name:
                status, error = exit_outcome(rc, stopping=self.stopping.is_set())
                finished = {} if status == RunStatus.queued else {"finished_at": utcnow()}
                change_status(s, run, status, settings=self.settings, error=error, pid=None, stalled_at=None,
                              **finished)
                log.log(logging.INFO if error is None else logging.WARNING, "run %s: %s", run.id,
                        error or "stopped while its job started; back in the queue")
            sweep_id = run.sweep_id if run is not None else None
        slot.process, slot.run_id = None, None
        if sweep_id is not None:
            try:
                with session_scope(self.settings) as s:
                    settle_sweep(s, sweep_id=sweep_id, settings=self.settings)
            except Exception:  # the heartbeat's settling tries again; the slot is free meanwhile
                log.exception("settling sweep %s after its trial's job ended failed; retrying later", sweep_id)

    def beat(self) -> None:
        """This worker's heartbeat, and the runs' whose job process is alive: the one writer of a run's
        heartbeat (its job's watcher writes its progress: the step and when it moved)."""
        now = time.monotonic()
        if now - self.last_beat < self.settings.heartbeat_sec:
            return
        self.last_beat = now
        live = [slot.run_id for slot in self.slots if slot.process is not None and slot.process.poll() is None]
        with session_scope(self.settings) as s:
            registry.beat(s, name=self.name)
            if not live:
                return
            s.exec(update(Run).where(col(Run.id).in_(live), col(Run.status) == RunStatus.running,  # type: ignore[call-overload]
                                     col(Run.worker) == self.name).values(heartbeat_at=utcnow()))
        with session_scope(self.settings) as s:
            check_stalls(s, worker=self.name, settings=self.settings)

    def tick(self) -> None:
        self.beat()
        with session_scope(self.settings) as s:
            reap_dead_runs(s, worker=self.name, own=False, settings=self.settings)
        self.settle_sweeps()
        for slot in self.slots:
            if slot.process is not None and slot.process.poll() is not None:
                self.reap_child(slot)
            if slot.process is None and not self.stopping.is_set():
                with session_scope(self.settings) as s:
                    run = claim_next(s, worker=self.name, host=self.host, slot=slot.device)
                if run is not None:
                    self.start_job(slot, run)
                    self.last_beat = 0.0

    def settle_sweeps(self) -> None:
        """Every heartbeat interval: move running sweeps on (their trials' ends told, the next queued)."""
        now = time.monotonic()
        if now - self.last_settle < self.settings.heartbeat_sec:
            return
        self.last_settle = now
        with session_scope(self.settings) as s:
            settle_running_sweeps(s, settings=self.settings)

    def shutdown(self) -> None:
        running = [slot for slot in self.slots if slot.process is not None]
        if running:
            log.info("stopping: asking runs %s to checkpoint", [slot.run_id for slot in running])
        for slot in running:
            slot.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + SHUTDOWN_GRACE_SEC
        for slot in running:
            try:
                slot.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                slot.process.kill()
                slot.process.wait()
            self.reap_child(slot)

    def register(self) -> None:
        """Take this worker's name (raises ``WorkerNameInUse`` while a live worker holds it)."""
        init_db(self.settings)
        with session_scope(self.settings) as s:
            registry.register(s, name=self.name, devices=[slot.device for slot in self.slots],
                              stale_after_sec=self.settings.stale_after_sec)

    def run(self) -> None:
        """Serve until asked to stop (``register`` first)."""
        with session_scope(self.settings) as s:
            reaped = reap_dead_runs(s, worker=self.name, own=True, settings=self.settings)
        if reaped:
            log.warning("found crashed runs %s", reaped)
        log.info("worker %s serving devices %s", self.name, [s.device for s in self.slots])
        for slot in self.slots:
            self.start_warm(slot)
        notifier = Notifier(self.settings, self.stopping).start()  # webhooks, outside any job
        while not self.stopping.is_set():
            try:
                self.tick()
            except Exception:  # a database hiccup must not end the worker: log it and try again
                log.exception("worker loop error; retrying")
            self.stopping.wait(self.settings.worker_poll_sec)
        self.shutdown()
        self.stop_warm()
        notifier.join(timeout=15)
        with session_scope(self.settings) as s:
            registry.unregister(s, name=self.name)
        log.info("worker %s stopped", self.name)


def run_worker(devices: list[str] | None = None, name: str | None = None, stop: threading.Event | None = None,
               parent: int | None = None) -> None:
    """Serve until SIGTERM or Ctrl-C (or ``stop``, set by the command's own early signal handlers);
    ``parent``: the pid of the ``tinygpt serve`` that started it, whose death stops it too."""
    # force: the `tinygpt` command has already set up logging at WARNING for the library commands
    logging.basicConfig(level=logging.INFO, format="%(asctime)s worker: %(levelname)s %(message)s", force=True)
    worker = Worker(get_settings(), devices or default_devices(), name)
    if stop is not None:
        worker.stopping = stop
    set_on_signals(worker.stopping)
    if parent is not None:
        end_with_parent(parent)
    if worker.stopping.is_set():
        log.info("worker stopped before it started")
        return
    worker.register()
    worker.run()
