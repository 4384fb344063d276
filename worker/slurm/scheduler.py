"""Slurm's own commands, as a person would type them: ``sbatch`` submits, ``squeue`` (``--states=all``: ended
jobs too, while the controller keeps them) and ``scontrol show job`` tell a job's state, reason and exit code,
``scancel`` cancels. Each runs with the environment the executor gives it (``SLURM_CONF`` finds the cluster)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

COMMAND_TIMEOUT_SEC = 60


class SlurmError(RuntimeError):
    """A Slurm command failed: its name and what it printed."""


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    state: str  # PENDING, RUNNING, COMPLETED, TIMEOUT, ...
    reason: str | None  # why a pending job waits (Resources, Priority, BeginTime, ...); None when none
    exit_code: str | None = None  # "0:0" (code:signal), from scontrol once the job ended


def run_command(args: list[str], env: dict[str, str], *, check: bool = True) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_SEC)
    except FileNotFoundError:
        raise SlurmError(f"{args[0]} is not installed on this machine (the Slurm executor needs Slurm's "
                         "client commands)") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{args[0]} did not answer within {COMMAND_TIMEOUT_SEC} s") from None
    if check and done.returncode != 0:
        raise SlurmError(f"{args[0]}: {(done.stderr or done.stdout).strip() or f'exit {done.returncode}'}")
    return done


def submit(script: Path, env: dict[str, str]) -> str:
    """``sbatch --parsable SCRIPT``: the new job's id."""
    out = run_command(["sbatch", "--parsable", str(script)], env).stdout.strip()
    return out.split(";")[0]  # "ID" or "ID;cluster"


def job_infos(job_ids: list[str], env: dict[str, str]) -> dict[str, JobInfo]:
    """What Slurm says of these jobs; a job it no longer knows (purged) is missing from the answer."""
    if not job_ids:
        return {}
    done = run_command(["squeue", "-h", "--states=all", "-o", "%i|%T|%r", "-j", ",".join(job_ids)], env, check=False)
    if done.returncode != 0 and "Invalid job id" not in done.stderr:
        raise SlurmError(f"squeue: {done.stderr.strip()}")
    infos = {}
    for line in done.stdout.splitlines():
        job_id, state, reason = (line.split("|") + ["", ""])[:3]
        infos[job_id] = JobInfo(job_id, state, None if reason in ("None", "") else reason)
    missing = [job_id for job_id in job_ids if job_id not in infos]
    return {**infos, **accounted_jobs(missing, env)} if missing else infos


def accounted_jobs(job_ids: list[str], env: dict[str, str]) -> dict[str, JobInfo]:
    """Ended jobs the controller has forgotten (after ``MinJobAge``), from Slurm's accounting (``sacct``) where
    the cluster keeps it; none where it does not (``accounting_storage/none``: sacct refuses)."""
    done = run_command(["sacct", "-n", "-P", "-X", "-o", "JobIDRaw,State,ExitCode", "-j", ",".join(job_ids)], env,
                       check=False)
    return parse_sacct(done.stdout) if done.returncode == 0 else {}


def parse_sacct(text: str) -> dict[str, JobInfo]:
    r"""``sacct -n -P -X -o JobIDRaw,State,ExitCode`` lines as job infos (a state such as ``CANCELLED by 1000``
    is its first word).

    >>> parse_sacct("41|TIMEOUT|0:15\n42|CANCELLED by 1000|0:0\n")["42"]
    JobInfo(job_id='42', state='CANCELLED', reason=None, exit_code='0:0')
    """
    infos = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) >= 3 and parts[1]:
            infos[parts[0]] = JobInfo(parts[0], parts[1].split()[0], None, parts[2] or None)
    return infos


def exit_code(job_id: str, env: dict[str, str]) -> str | None:
    """An ended job's ``ExitCode`` (``code:signal``) from ``scontrol show job``; None when Slurm no longer has it."""
    done = run_command(["scontrol", "show", "job", "-o", job_id], env, check=False)
    for part in done.stdout.split():
        key, _, value = part.partition("=")
        if key == "ExitCode":
            return value
    return None


def cancel(job_id: str, env: dict[str, str]) -> None:
    """``scancel JOB``: a pending job leaves the queue; a running one gets SIGTERM, then SIGKILL after KillWait."""
    run_command(["scancel", job_id], env)
