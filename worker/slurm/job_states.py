"""Slurm's job states onto a run's statuses, with the reason kept in words.

While a job waits or runs, the run's own trainer tells its progress and, when it can, its end (succeeded,
failed, cancelled at a step boundary). What only the scheduler knows, the executor reads here: a job that
ended without its trainer saying so (a time limit, a node that failed, an out-of-memory kill, a cancel while
it was pending) ends its run with this status and message.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.models import RunStatus

from .scheduler import JobInfo

#: The job is still the scheduler's: waiting, starting, running or being requeued.
ACTIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
                    "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD",
                    "SPECIAL_EXIT"})
#: Waiting to (re)start: a running run whose job is here again was requeued (preemption, scontrol requeue).
WAITING = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
#: What the executor writes for a job Slurm no longer knows (purged from the controller, no accounting).
GONE = "GONE"
SUBMITTING = "SUBMITTING"  # the executor has taken the run and is calling sbatch

ENDED_WORDS = {
    "FAILED": "failed",
    "OUT_OF_MEMORY": "ran out of memory",
    "NODE_FAIL": "lost its node (NODE_FAIL)",
    "BOOT_FAIL": "could not boot its node (BOOT_FAIL)",
    "PREEMPTED": "was preempted and not requeued",
    "DEADLINE": "reached its deadline",
    "REVOKED": "was revoked",
    GONE: "is no longer known to Slurm",
}


@dataclass(frozen=True)
class RunEnd:
    status: RunStatus
    error: str | None  # None: an end that is no error (a trial its sweep pruned)


def run_end(info: JobInfo, *, time_limit: str, step: int, has_last: bool, cancel_requested: bool,
            prune_requested: bool = False) -> RunEnd:
    """How a run ends whose job ended (``info.state`` not in :data:`ACTIVE`) without its trainer telling.

    >>> run_end(JobInfo("7", "TIMEOUT", None), time_limit="00:10:00", step=740, has_last=True,
    ...         cancel_requested=False).error
    'time limit 00:10:00 reached at step 740; last.pt kept'
    """
    kept = "last.pt kept" if has_last else "no last.pt yet"
    job = f"Slurm job {info.job_id}"
    if info.state == "CANCELLED" and prune_requested:
        return RunEnd(RunStatus.pruned, None)
    if info.state == "CANCELLED":
        how = "cancelled from the dashboard" if cancel_requested else f"{job} was cancelled outside the dashboard"
        return RunEnd(RunStatus.cancelled, f"{how} at step {step}; {kept}")
    if info.state == "TIMEOUT":
        return RunEnd(RunStatus.failed, f"time limit {time_limit} reached at step {step}; {kept}")
    if info.state == "COMPLETED":
        return RunEnd(RunStatus.failed, f"{job} ended at step {step} without its trainer reporting how "
                                        f"(slurm-{info.job_id}.out in the run folder says why)")
    words = ENDED_WORDS.get(info.state, f"ended {info.state}")
    code = f" (exit code {info.exit_code})" if info.exit_code and info.exit_code != "0:0" else ""
    return RunEnd(RunStatus.failed, f"{job} {words}{code} at step {step}; {kept}")
