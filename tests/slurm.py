"""A throw-away single-node Slurm cluster for the tests: Debian's ``slurm-wlm`` and ``munge``
(``scripts/install-slurm.sh``), configured in a temporary folder (its own munge key and socket, free
local ports, its own state and logs), started as root and stopped at the end of the session.

It runs in a container without systemd or cgroups: ``proctrack/linuxproc`` follows a job's processes
by their parent ids and ``task/none`` binds nothing. No accounting database: finished jobs are read
with ``scontrol show job`` (kept ``MinJobAge`` seconds), as the executor does without ``sacct``.
Every Slurm command finds this cluster through ``SLURM_CONF`` (:meth:`SlurmCluster.env`).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from .service_helpers import free_port

NODE = "tinygpt-node"
PARTITION = "debug"
CPUS = 2  # the machine's cores: two one-core jobs run at once, a third waits for Resources


def slurm_installed() -> bool:
    return all(shutil.which(tool) for tool in ("slurmctld", "slurmd", "munged", "sbatch"))


def slurm_conf(root: Path, *, ctld_port: int, slurmd_port: int, munge_socket: Path) -> str:
    host = socket.gethostname()
    return "\n".join([
        "ClusterName=tinygpt-test",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={munge_socket}",
        f"StateSaveLocation={root}/state",
        f"SlurmdSpoolDir={root}/spool",
        f"SlurmctldPidFile={root}/slurmctld.pid",
        f"SlurmdPidFile={root}/slurmd.pid",
        f"SlurmctldLogFile={root}/slurmctld.log",
        f"SlurmdLogFile={root}/slurmd.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "ReturnToService=2",
        "MinJobAge=3600",
        "KillWait=15",  # seconds between a job's SIGTERM and its SIGKILL (time limit, scancel)
        "OverTimeLimit=0",
        "SchedulerParameters=sched_interval=2",
        "MessageTimeout=30",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=60",
        "InactiveLimit=0",
        "JobRequeue=1",
        "MpiDefault=none",
        f"NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={CPUS} State=UNKNOWN",
        f"PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


class SlurmCluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        for sub in ("state", "spool", "munge"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(root / "munge", 0o700)
        self.munge_socket = root / "munge" / "munge.socket"
        self.conf = root / "slurm.conf"
        self.conf.write_text(slurm_conf(root, ctld_port=free_port(), slurmd_port=free_port(),
                                        munge_socket=self.munge_socket))
        self.processes: list[subprocess.Popen] = []
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        self._start(["munged", "-F", "--force", f"--key-file={key}", f"--socket={self.munge_socket}",
                     f"--pid-file={root}/munge/munged.pid", f"--log-file={root}/munge/munged.log",
                     f"--seed-file={root}/munge/munged.seed"], "munged")
        self._wait(lambda: self.munge_socket.exists(), "munged's socket")
        self._start(["slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld")
        self._wait(self._controller_answers, "slurmctld")
        self._start(["slurmd", "-D", "-N", NODE, "-f", str(self.conf)], "slurmd")
        self._wait(self._node_idle, f"node {NODE} to be idle")

    def env(self) -> dict[str, str]:
        """What a process needs in its environment to use this cluster's commands."""
        return {"SLURM_CONF": str(self.conf)}

    def command(self, *args: str, check: bool = True) -> str:
        done = subprocess.run(list(args), env={**os.environ, **self.env()}, capture_output=True, text=True,
                              timeout=60)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout.strip()

    def job_field(self, job_id: str, field: str) -> str:
        """One field of ``scontrol show job`` (JobState, Reason, RunTime, ...)."""
        for part in self.command("scontrol", "show", "job", "-o", job_id).split():
            key, _, value = part.partition("=")
            if key == field:
                return value
        raise KeyError(field)

    def _start(self, cmd: list[str], name: str) -> None:
        log = open(self.root / f"{name}.stdout", "wb")  # noqa: SIM115 - kept open by the daemon
        self.processes.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                               env={**os.environ, **self.env()}))

    def _controller_answers(self) -> bool:
        return subprocess.run(["scontrol", "ping"], env={**os.environ, **self.env()}, capture_output=True,
                              text=True, timeout=30).stdout.count("is UP") > 0

    def _node_idle(self) -> bool:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env={**os.environ, **self.env()},
                             capture_output=True, text=True, timeout=30).stdout
        return out.strip().startswith("idle")

    def _wait(self, ready: object, what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in self.processes:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[0]} exited with {p.returncode} while waiting for {what}: "
                                       f"{self.logs()}")
            if ready():  # type: ignore[operator]
                return
            time.sleep(0.3)
        raise RuntimeError(f"timed out waiting for {what}: {self.logs()}")

    def logs(self) -> str:
        tails = []
        for name in ("slurmctld.log", "slurmd.log", "slurmctld.stdout", "slurmd.stdout", "munged.stdout"):
            path = self.root / name
            if path.exists():
                tails.append(f"--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(tails)

    def stop(self) -> None:
        """Cancel the jobs left (their slurmstepd would outlive the daemons), then stop the daemons."""
        try:
            jobs = self.command("squeue", "-h", "-o", "%i").split()
            if jobs:
                self.command("scancel", *jobs, check=False)
                deadline = time.monotonic() + 30
                while self.command("squeue", "-h", "-o", "%i", check=False) and time.monotonic() < deadline:
                    time.sleep(0.5)
        except (RuntimeError, subprocess.TimeoutExpired):
            pass  # the controller is gone already: the daemons are stopped below all the same
        for p in reversed(self.processes):
            p.terminate()
        for p in reversed(self.processes):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
