"""One job, in its own process: ``python -m worker.job RUN_ID ATTEMPT``.

Runs the ``tinygpt`` training loop for a claimed run (or, for a benchmark run, the
``tinygpt.bench`` sweep) and writes what happens to the database as it happens (metrics,
samples, checkpoints, benchmark cells, status), through the library's callbacks. A watcher
thread writes the heartbeat, notices a cancel request (and interrupts the step at once, but
never a database or checkpoint write: see ``worker.cancel``) and exits if the worker that started it is gone.

SIGTERM (sent by a worker that is shutting down) stops the job after the current
step with ``last.pt`` saved, and puts the run back in the queue to resume.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import resource
import signal
import statistics
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

from sqlmodel import Session

from app.db import get_engine, session_scope
from app.models import Alert, EventType, Run, RunKind, RunStatus, utcnow
from app.services import benchmarks as bench_svc
from app.services import study as studies
from app.services.datasets import HOLMES, dataset_path, ensure_builtin, record_tokenizer
from app.services.events import record_event
from app.services.files import remove_file, run_disk_bytes
from app.services.head_scores import record_head_scores
from app.services.lifecycle import change_status
from app.services.run_records import record_best_checkpoint, record_metric, record_sample, record_start
from app.services.sweeps import get_sweep, report_evaluation
from app.settings import Settings, get_settings
from tinygpt import distributed
from tinygpt.bench import Cell, SweepConfig, plan, sweep
from tinygpt.device import describe_device, is_out_of_memory, resolve_device
from tinygpt.distributed import torchrun_command
from tinygpt.gutenberg import download_holmes
from tinygpt.ranks import DistInfo, dist_info
from tinygpt.records import Callbacks, StepMetrics
from tinygpt.records import Sample as TrainSample
from tinygpt.run_config import OPTIONS, TrainConfig
from tinygpt.stop_signals import set_on_signals
from tinygpt.train import NonFiniteLoss, Trainer

from .cancel import JobCancelled, cancel_interrupt
from .parent import end_with_parent

log = logging.getLogger("worker.job")

EXIT_OK = 0


@contextmanager
def job_session(settings: Settings | None = None) -> Iterator[Session]:
    """A database session in the job's main thread: a cancel never interrupts it half-way."""
    with cancel_interrupt.shielded(), session_scope(settings) as session:
        yield session


@dataclass
class SweepTrial:
    """A run that is a sweep's trial: the study it reports to."""

    sweep_id: int
    number: int
    study: Any
    eval_every: int

    @classmethod
    def of(cls, run: Run, settings: Settings) -> SweepTrial | None:
        if run.sweep_id is None:
            return None
        with job_session(settings) as s:
            config = get_sweep(s, sweep_id=run.sweep_id).config
        study = studies.load(settings, run.sweep_id, config)
        return cls(run.sweep_id, run.trial, study, int(run.config["eval_every"]))


class JobCallbacks(Callbacks):
    """Writes each metric, sample and checkpoint of the run to the database at once."""

    def __init__(self, run_id: int, settings: Settings) -> None:
        self.run_id = run_id
        self.settings = settings
        self.preempted = threading.Event()  # SIGTERM: stop after this step, back to the queue
        self.cancelled = threading.Event()  # set by the watcher on a cancel request
        self.last_eval: StepMetrics | None = None
        self.trial: SweepTrial | None = None  # set for a sweep's trial
        self.pruned = threading.Event()  # the sweep's pruner stopped this trial
        self.last_progress: tuple[int, float] | None = None  # (step, time.monotonic()) of the last step
        self.step_secs: deque[float] = deque(maxlen=50)  # the last steps' durations (evaluations included)

    def on_start(self, info: dict) -> None:
        with job_session(self.settings) as s:
            run = s.get(Run, self.run_id)
            record_start(s, run, info)
            run.progress_at = utcnow()  # the stall check's clock starts with training
            self.last_progress = (info["start_step"], time.monotonic())

    def on_step(self, m: StepMetrics) -> None:
        with job_session(self.settings) as s:  # an evaluation's row brings the overfitting verdict too
            record_metric(s, s.get(Run, self.run_id), vars(m), settings=self.settings)

    def on_eval(self, m: StepMetrics) -> None:
        self.last_eval = m
        if self.trial is not None and m.step > 0:
            self.report_to_sweep(m)

    def on_progress(self, step: int) -> None:
        now = time.monotonic()
        if self.last_progress is not None:
            self.step_secs.append(now - self.last_progress[1])
        self.last_progress = (step, now)

    def progress_fields(self) -> dict:
        """When the run's step last advanced, and its median step time: for the stall check."""
        if self.last_progress is None:
            return {}
        ago = time.monotonic() - self.last_progress[1]
        return {"progress_at": utcnow() - timedelta(seconds=ago),
                "step_sec": statistics.median(self.step_secs) if self.step_secs else None}

    def report_to_sweep(self, m: StepMetrics) -> None:
        """A sweep's trial: the evaluation's loss to the study; stop when its pruner says so."""
        trial = self.trial
        with job_session(self.settings) as s:
            prune = report_evaluation(s, study=trial.study, sweep_id=trial.sweep_id, trial=trial.number,
                                      run_id=self.run_id, step=m.step, val_loss=m.val_loss,
                                      train_loss=m.train_loss, eval_every=trial.eval_every)
        if prune:
            self.pruned.set()

    def on_head_scores(self, step: int, scores: dict[str, list[list[float]]]) -> None:
        with job_session(self.settings) as s:
            record_head_scores(s, run_id=self.run_id, step=step, scores=scores)

    def on_sample(self, sample: TrainSample) -> None:
        with job_session(self.settings) as s:
            record_sample(s, self.run_id, vars(sample))

    def on_checkpoint(self, path: Path, kind: str) -> None:
        with job_session(self.settings) as s:
            run = s.get(Run, self.run_id)
            if kind == "best" and self.last_eval is not None:
                record_best_checkpoint(s, run, path=path, step=self.last_eval.step, val_loss=self.last_eval.val_loss)
            else:
                run.disk_bytes = run_disk_bytes(run)
                s.add(run)

    def writing(self) -> AbstractContextManager[None]:
        # a cancel that lands inside torch.save breaks the file's zip writer, and the run ended `failed`
        return cancel_interrupt.shielded()

    def should_stop(self) -> bool:
        # a cancel also interrupts a step at once (not a distributed run's: its ranks stop together here), but an
        # interrupt that lands in a finalizer is swallowed by Python: the flag stops the run all the same
        return self.preempted.is_set() or self.pruned.is_set() or self.cancelled.is_set()


def watch(run_id: int, attempt: int, settings: Settings, cancelled: threading.Event,
          done: threading.Event, interrupt: Callable[[], None] | None = None,
          progress: Callable[[], dict] = dict) -> None:
    """The step's ``progress`` (for the stall check); on cancel, set ``cancelled`` and call ``interrupt``
    (without one, the training loop sees the flag between steps: a distributed run, whose ranks must
    stop together); exit if the run moved on. A worker that died is told by ``worker.parent`` (SIGTERM:
    the run stops at its next step boundary and goes back to the queue). Runs in its own thread: its
    sessions are not shielded."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})  # faulthandler's stack dumps go to the main thread
    interval = min(0.5, settings.heartbeat_sec)
    beats = settings.heartbeat_sec  # the first beat at once
    while True:
        with session_scope(settings) as s:
            run = s.get(Run, run_id)
            if run is None or run.status != RunStatus.running or run.attempt != attempt:
                os._exit(4)  # someone else owns the run now
            if run.cancel_requested and not cancelled.is_set():
                cancelled.set()
                if interrupt is not None:
                    interrupt()
            if beats >= settings.heartbeat_sec:  # the step's progress; the heartbeat is the worker's
                for key, value in progress().items():
                    setattr(run, key, value)
                s.add(run)
                beats = 0.0
        if done.wait(interval):
            return
        beats += interval


def limit_memory(settings: Settings) -> None:
    """Cap this process's address space at ``TINYGPT_JOB_MEMORY_MB``: past it, allocations fail
    (and the run ends ``out of memory``) instead of the kernel's OOM killer picking a victim."""
    if settings.job_memory_mb is not None:
        limit = settings.job_memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def failure_message(exc: BaseException, run: Run) -> str:
    """What the run page shows for a job that raised ``exc``."""
    if is_out_of_memory(exc):
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return (f"out of memory on {run.device or 'the device'} at batch_size {run.config.get('batch_size')}: "
                f"{first} (try a smaller batch_size, or gradient accumulation)")
    return f"{type(exc).__name__}: {exc}"


def train_config(run: Run, corpus: Path) -> TrainConfig:
    """The run's stored options are the declaration's own (``tinygpt.run_config.OPTIONS``): read back with a
    check; the corpus file and the claimed device are the worker's."""
    options = {name: value for name, value in run.training_options.items() if name in OPTIONS}
    return TrainConfig.from_dict({**options, "corpus": str(corpus), "device": run.device or "auto"})


def corpus_for(run: Run, settings: Settings) -> Path:
    with job_session(settings) as s:
        path = dataset_path(s, name=run.config["dataset"], settings=settings)
    if not path.exists():
        if run.config["dataset"] != HOLMES:
            raise FileNotFoundError(f"dataset {run.config['dataset']!r} file is missing: {path}")
        log.info("Holmes corpus not found at %s; downloading it", path)
        download_holmes(path)
    return path


def finish(run_id: int, attempt: int, outcome: Outcome, settings: Settings) -> None:
    """Record how the job ended (the lifecycle tells people). A run that has ended drops its resume point
    (``last.pt``: best.pt is what it leaves). A run that moved on meanwhile (taken as crashed, claimed
    again) is left as it is. A sweep's trial moves its sweep on when its worker sees this job end."""
    status = outcome.status
    with session_scope(settings) as s:
        run = s.get(Run, run_id)
        if run.attempt != attempt or run.status != RunStatus.running:
            log.warning("run %s moved on (%s, attempt %s) while attempt %s ended: left as it is", run_id,
                        run.status, run.attempt, attempt)
            return
        fields: dict = {"error": outcome.error, "pid": None, "stop_reason": outcome.stop_reason, "stalled_at": None}
        if status != RunStatus.queued:
            fields["finished_at"] = utcnow()
            if run.out_dir:
                remove_file(Path(run.out_dir) / "last.pt")
        fields["disk_bytes"] = run_disk_bytes(run)
        change_status(s, run, status, settings=settings, alert=outcome.alert, **fields)
    log.info("run %s: %s%s", run_id, status, f" ({outcome.error or outcome.stop_reason})"
             if outcome.error or outcome.stop_reason else "")


def run_training(run: Run, settings: Settings, callbacks: JobCallbacks, dist: DistInfo) -> tuple[bool, str | None]:
    """Train (or resume) the run: (stopped before its end by a request: preempted, pruned, a distributed
    run cancelled; early stopping's reason, when the run's patience ran out)."""
    corpus = corpus_for(run, settings)
    config = train_config(run, corpus)
    try:
        trainer = Trainer(config, run.out_dir, callbacks=callbacks, cache_dir=settings.cache_dir,
                          resume=bool(run.config.get("resume", True)), dist=dist)
        with job_session(settings) as s:
            if run.config["dataset"] == HOLMES:
                ensure_builtin(s, settings=settings)
            record_tokenizer(s, name=run.config["dataset"], vocab_size=trainer.tokenizer.vocab_size,
                             fingerprint=trainer.tokenizer.fingerprint(),
                             tokens=len(trainer.splits.train) + len(trainer.splits.val))
        result = trainer.run()
        return result.stopped, result.stop_reason
    finally:
        distributed.stop()


def run_rank(run: Run, settings: Settings, dist: DistInfo) -> int:
    """A rank other than 0 of a distributed run: train its share; rank 0 reports and checkpoints."""
    config = train_config(run, corpus_for(run, settings))
    try:
        Trainer(config, run.out_dir, cache_dir=settings.cache_dir, resume=bool(run.config.get("resume", True)),
                dist=dist).run()
    finally:
        distributed.stop()
    return EXIT_OK


def run_benchmark(run: Run, settings: Settings, callbacks: JobCallbacks) -> tuple[bool, None]:
    """Measure every cell of the sweep, storing each as it completes; True when preempted part-way."""
    c = run.config
    config = SweepConfig(preset=c["preset"], arch=c.get("arch"), device=run.device or "auto",
                         batch_sizes=c["batch_sizes"], precisions=c.get("precisions"), threads=c.get("threads"),
                         steps=c["steps"], warmup=c["warmup"]).validate()
    device = resolve_device(config.device)
    total = len(plan(config, device))
    with job_session(settings) as s:
        bench_svc.start_sweep(s, run_id=run.id, cells=total)
        record_event(s, run_id=run.id, type=EventType.log,
                     data={"message": f"benchmark of {total} cells on {device} ({describe_device(device).get('name')})"})
        r = s.get(Run, run.id)
        r.device_info = describe_device(device)
        s.add(r)

    def store(index: int, _total: int, cell: Cell) -> None:
        with job_session(settings) as s:
            bench_svc.record_cell(s, run_id=run.id, index=index, cell=cell)

    cells = sweep(config, on_cell=store, should_stop=callbacks.should_stop)
    return len(cells) < total, None


def main(argv: list[str]) -> int:
    """Run ``RUN_ID ATTEMPT`` to its end. The schema is the worker's business: it brought the database up to
    date when it registered, before it claimed this run."""
    parent = os.getppid()
    end_with_parent(parent)  # SIGTERM when the worker dies: checkpoint, back to the queue
    run_id, attempt = int(argv[0]), int(argv[1])
    # `kill -USR1 PID`: where is this job? (its main thread's stack, in the worker's log). Not all threads:
    # faulthandler reads other threads' frames without the GIL, and a test probing a job 50 times a second
    # once crashed it (SIGSEGV) while the watcher thread was inside SQLAlchemy. The watcher blocks SIGUSR1.
    faulthandler.register(signal.SIGUSR1, all_threads=False)
    dist = dist_info()
    logging.basicConfig(level=logging.INFO, format=f"job {run_id} (rank {dist.rank}): %(levelname)s %(message)s")
    settings = get_settings()
    limit_memory(settings)
    with session_scope(settings) as s:
        run = s.get(Run, run_id)
        if dist.is_main:
            run.pid = os.getpid()
            s.add(run)
    gpus = int(run.config.get("gpus", 1))
    if gpus > 1 and not dist.enabled:
        # Become torchrun (same pid, so the worker still watches this process); it starts the ranks,
        # each of which runs this module again. Rank 0 does what a single job does; the others train.
        command = torchrun_command(gpus, "worker.job", str(run_id), str(attempt))
        os.execv(command[0], command)
    if not dist.is_main:
        return run_rank(run, settings, dist)
    callbacks = JobCallbacks(run_id, settings)
    callbacks.trial = SweepTrial.of(run, settings)
    set_on_signals(callbacks.preempted, [signal.SIGTERM])
    done = threading.Event()
    if not dist.enabled:
        cancel_interrupt.install()
    watcher = threading.Thread(target=watch, args=(run_id, attempt, settings, callbacks.cancelled, done),
                               kwargs={"interrupt": None if dist.enabled else cancel_interrupt.fire,
                                       "progress": callbacks.progress_fields}, daemon=True)
    outcome = job_outcome(run, settings, callbacks, dist, watcher)
    done.set()
    finish(run_id, attempt, outcome, settings)
    return EXIT_OK


@dataclass
class Outcome:
    """How a job ended: the run's status, and what to say about it."""

    status: RunStatus
    error: str | None = None
    stop_reason: str | None = None  # early stopping's
    alert: Alert | None = None  # when not the status's own (a NaN loss)


def job_outcome(run: Run, settings: Settings, callbacks: JobCallbacks, dist: DistInfo,
                watcher: threading.Thread) -> Outcome:
    """Run the job to its end; how it ended. A cancel that lands after the job has ended is ignored:
    ``cancel_interrupt`` is closed in the ``finally``, inside the outer ``try``."""
    try:
        try:  # the watcher may interrupt at once (a cancel that came early): start it inside the try
            watcher.start()
            stopped, stop_reason = run_benchmark(run, settings, callbacks) if run.kind == RunKind.benchmark else \
                run_training(run, settings, callbacks, dist)
        except NonFiniteLoss as exc:  # a finding about the run: the message tells the whole story
            log.warning("run %s: %s", run.id, exc)
            return Outcome(RunStatus.failed, str(exc), alert=Alert.nonfinite_loss)
        except Exception as exc:  # the job failed: record why, keep the worker serving
            log.error("run %s failed:\n%s", run.id, traceback.format_exc())
            return Outcome(RunStatus.failed, failure_message(exc, run))
        finally:
            cancel_interrupt.close()
    except JobCancelled:
        return Outcome(RunStatus.cancelled, "cancelled by request")
    except KeyboardInterrupt:  # a SIGINT from outside (the worker starts jobs in their own session)
        return Outcome(RunStatus.failed, "interrupted")
    if stopped and callbacks.preempted.is_set():
        return Outcome(RunStatus.queued)
    if stopped and callbacks.pruned.is_set():
        return Outcome(RunStatus.pruned)
    if stopped and callbacks.cancelled.is_set():
        return Outcome(RunStatus.cancelled, "cancelled by request")
    return Outcome(RunStatus.succeeded, stop_reason=stop_reason)


def exit_at_once(code: int) -> NoReturn:
    """Leave without the interpreter's teardown (about a second with torch loaded, more on a busy machine,
    during which the worker's slot stays taken): what the job recorded is committed, so only the logs, the
    streams and the database connections are closed first."""
    get_engine().dispose()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_at_once(main(sys.argv[1:]))
