"""The Slurm executor process (``tinygpt slurm-executor``; ``tinygpt serve`` starts one when ``TINYGPT_SLURM``
is on): every ``TINYGPT_SLURM_POLL_SEC`` it

1. submits the ``slurm`` pool's queued runs with ``sbatch`` (each taken by a compare-and-set, so two
   executors never submit one run twice), the script kept with the run and a run-scoped token in the job's
   environment (never the dashboard's own token: the job gets none of the ``TINYGPT_*`` settings);
2. follows their jobs with ``squeue``: the state and the reason a pending job waits are stored and logged;
   a cancel asked on the dashboard is an ``scancel``; a running run whose job is pending again was requeued
   (it resumes from ``last.pt``); a job that ended without its trainer reporting an end ends its run
   (``job_states.run_end``: a time limit, a lost node, a cancel while pending);
3. moves sweeps on (their trials are Slurm runs like any other).

Everything about the run between those moments comes from the trainer itself, through the reporting API.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from sqlalchemy import or_, update
from sqlmodel import Session, col, select

from app.db import init_db, session_scope
from app.models import EventType, Pool, Run, RunStatus, slurm_state_text, utcnow
from app.services import study as studies
from app.services.datasets import dataset_path
from app.services.events import record_event
from app.services.lifecycle import change_status
from app.services.metric_history import evaluations_after
from app.services.run_tokens import new_run_token
from app.services.sweeps import get_sweep, report_evaluation, settle_running_sweeps
from app.settings import Settings, get_settings
from tinygpt.stop_signals import set_on_signals

from . import scheduler
from .batch_script import batch_script
from .job_states import ACTIVE, GONE, SUBMITTING, WAITING, run_end
from .scheduler import JobInfo, SlurmError

log = logging.getLogger("slurm-executor")
SUBMIT_BATCH = 20  # queued runs submitted per round at most
END_GRACE_SEC = 10.0  # a job's end waits this long for its trainer's own last report before the executor tells it
SCRIPT_NAME = "slurm-job.sh"


def job_environment() -> dict[str, str]:
    """The environment ``sbatch`` hands the job: this process's, less every ``TINYGPT_*`` setting (the
    dashboard's token, its database URL); the run's own token is added per job."""
    return {k: v for k, v in os.environ.items() if not k.startswith("TINYGPT_")}


class SlurmExecutor:
    def __init__(self, settings: Settings, stopping: threading.Event | None = None) -> None:
        self.settings = settings
        self.stopping = stopping or threading.Event()
        self.env = job_environment()
        self.cancelled: set[str] = set()  # jobs this executor has scancel'ed
        self.ended_at: dict[str, float] = {}  # when a job was first seen ended (its trainer's grace)
        self.reported_step: dict[int, int] = {}  # a Slurm trial's last evaluation told to its study

    # -- submitting ------------------------------------------------------------------------------
    def submit_queued(self, session: Session) -> list[int]:
        """Submit the pool's queued runs not submitted yet; the ids submitted."""
        queued = session.exec(select(Run.id).where(Run.status == RunStatus.queued, Run.pool == Pool.slurm,
                                                   col(Run.slurm_state).is_(None))
                              .order_by(col(Run.id)).limit(SUBMIT_BATCH)).all()
        submitted = []
        for run_id in queued:
            taken = session.exec(update(Run).where(col(Run.id) == run_id, col(Run.status) == RunStatus.queued,  # type: ignore[call-overload]
                                                   col(Run.slurm_state).is_(None)).values(slurm_state=SUBMITTING))
            session.commit()
            if taken.rowcount == 1 and self.submit(session, session.get(Run, run_id)):
                submitted.append(run_id)
        return submitted

    def submit(self, session: Session, run: Run) -> bool:
        """``sbatch`` one run; a refusal ends it failed with sbatch's words (commits)."""
        session.refresh(run)
        try:
            corpus = dataset_path(session, name=run.config["dataset"], settings=self.settings)
            script = batch_script(run, corpus=corpus, settings=self.settings)
            folder = Path(run.out_dir)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / SCRIPT_NAME).write_text(script)
            token = new_run_token(run)
            session.add(run)
            session.commit()  # the token's hash before the job can use it
            job_id = scheduler.submit(folder / SCRIPT_NAME, {**self.env, "TINYGPT_API_TOKEN": token})
        except (SlurmError, OSError) as exc:
            log.warning("run %s: not submitted: %s", run.id, exc)
            change_status(session, run, RunStatus.failed, settings=self.settings, error=f"not submitted to Slurm: {exc}",
                          finished_at=utcnow(), slurm_state=None, job_token_hash=None)
            session.commit()
            return False
        run.slurm_job_id, run.slurm_state, run.slurm_reason, run.job_script = job_id, "PENDING", None, script
        session.add(run)
        record_event(session, run_id=run.id, type=EventType.log,
                     data={"message": f"submitted to Slurm as job {job_id} (time limit "
                                      f"{run.time_limit or self.settings.slurm_time_limit})"})
        session.commit()
        log.info("run %s: submitted as Slurm job %s", run.id, job_id)
        return True

    # -- following -------------------------------------------------------------------------------
    def follow_jobs(self, session: Session) -> None:
        """Every submitted run not ended, or whose job has not ended: what Slurm says of its job (commits)."""
        runs = session.exec(select(Run).where(
            Run.pool == Pool.slurm, col(Run.slurm_job_id).is_not(None),
            or_(col(Run.status).in_([RunStatus.queued, RunStatus.running]), col(Run.slurm_state).in_(ACTIVE)))).all()
        if not runs:
            return
        infos = scheduler.job_infos([r.slurm_job_id for r in runs], self.env)
        for run in runs:
            self.follow(session, run, infos.get(run.slurm_job_id) or JobInfo(run.slurm_job_id, GONE, None))
        session.commit()

    def follow(self, session: Session, run: Run, info: JobInfo) -> None:
        if (info.state, info.reason) != (run.slurm_state, run.slurm_reason):
            run.slurm_state, run.slurm_reason = info.state, info.reason
            session.add(run)
            record_event(session, run_id=run.id, type=EventType.log,
                         data={"message": f"Slurm job {info.job_id}: {slurm_state_text(info.state, info.reason)}"})
        if info.state in ACTIVE:
            self.ended_at.pop(info.job_id, None)
            if run.cancel_requested and info.job_id not in self.cancelled:
                self.cancel(session, run, info)
            elif run.status == RunStatus.running and info.state in WAITING:
                change_status(session, run, RunStatus.queued, settings=self.settings, stalled_at=None)
                record_event(session, run_id=run.id, type=EventType.log, data={
                    "message": f"requeued by Slurm ({slurm_state_text(info.state, info.reason)}): it resumes from last.pt"})
            return
        if RunStatus(run.status).finished:
            return
        first_seen = self.ended_at.setdefault(info.job_id, time.monotonic())
        if time.monotonic() - first_seen < END_GRACE_SEC and info.state != GONE:
            return  # the trainer's own last report may still be on its way
        self.end_run(session, run, info)

    def cancel(self, session: Session, run: Run, info: JobInfo) -> None:
        try:
            scheduler.cancel(info.job_id, self.env)
        except SlurmError as exc:
            log.warning("run %s: scancel %s failed: %s; trying again", run.id, info.job_id, exc)
            return
        self.cancelled.add(info.job_id)
        record_event(session, run_id=run.id, type=EventType.log,
                     data={"message": f"scancel {info.job_id}: cancel asked on the dashboard"})
        if run.status == RunStatus.queued:  # it never started: nothing will report
            change_status(session, run, RunStatus.cancelled, settings=self.settings, finished_at=utcnow(),
                          error=f"cancelled while its Slurm job waited ({slurm_state_text(info.state, info.reason)})")

    def end_run(self, session: Session, run: Run, info: JobInfo) -> None:
        if info.state != GONE and info.exit_code is None:
            info = JobInfo(info.job_id, info.state, info.reason, scheduler.exit_code(info.job_id, self.env))
        end = run_end(info, time_limit=run.time_limit or self.settings.slurm_time_limit, step=run.last_step,
                      has_last=(Path(run.out_dir) / "last.pt").exists(), cancel_requested=run.cancel_requested,
                      prune_requested=run.prune_requested)
        change_status(session, run, end.status, settings=self.settings, error=end.error, finished_at=utcnow(),
                      stalled_at=None)
        log.info("run %s: %s", run.id, end.error or end.status)

    # -- sweeps ----------------------------------------------------------------------------------
    def prune_trials(self, session: Session) -> None:
        """The evaluations Slurm trials have reported since the last round, to their sweeps' studies; a trial
        the pruner stops is cancelled with ``prune_requested`` (its end is ``pruned``). Commits."""
        trials = session.exec(select(Run).where(Run.pool == Pool.slurm, col(Run.sweep_id).is_not(None),
                                                Run.status == RunStatus.running, Run.cancel_requested == False)).all()  # noqa: E712
        studies_by_sweep: dict[int, object] = {}
        for run in trials:
            rows = evaluations_after(session, run_id=run.id, step=self.reported_step.get(run.id, 0))
            for row in rows:
                if run.sweep_id not in studies_by_sweep:
                    config = get_sweep(session, sweep_id=run.sweep_id).config
                    studies_by_sweep[run.sweep_id] = studies.load(self.settings, run.sweep_id, config)
                self.reported_step[run.id] = row.step
                if report_evaluation(session, study=studies_by_sweep[run.sweep_id], sweep_id=run.sweep_id,
                                     trial=run.trial, run_id=run.id, step=row.step, val_loss=row.val_loss,
                                     train_loss=row.train_loss, eval_every=int(run.config["eval_every"])):
                    run.cancel_requested, run.prune_requested = True, True
                    session.add(run)
                    break
        session.commit()

    # -- the loop --------------------------------------------------------------------------------
    def tick(self) -> None:
        with session_scope(self.settings) as s:
            self.submit_queued(s)
        with session_scope(self.settings) as s:
            self.follow_jobs(s)
        with session_scope(self.settings) as s:
            self.prune_trials(s)
        with session_scope(self.settings) as s:
            settle_running_sweeps(s, settings=self.settings)

    def run(self) -> None:
        init_db(self.settings)
        log.info("Slurm executor: runs of the slurm pool go to sbatch; reporting to %s",
                 self.settings.slurm_report_url)
        while not self.stopping.is_set():
            try:
                self.tick()
            except Exception:  # a database or scheduler hiccup must not end the executor: log it, try again
                log.exception("Slurm executor loop error; retrying")
            self.stopping.wait(self.settings.slurm_poll_sec)
        log.info("Slurm executor stopped (jobs go on; their runs report as they train)")


def run_slurm_executor(stop: threading.Event | None = None) -> None:
    """Serve until SIGTERM or Ctrl-C (or ``stop``)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s slurm-executor: %(levelname)s %(message)s",
                        force=True)
    executor = SlurmExecutor(get_settings(), stop)
    set_on_signals(executor.stopping)
    executor.run()
