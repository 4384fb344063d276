"""The batch script of a Slurm run: ``#SBATCH`` lines from the settings and the run's own time limit and GPUs,
then ``tinygpt train`` with the run's options, reporting to the dashboard (``--report-to``, ``--report-run``,
``--scheduled``). The run-scoped token is not in the script: the executor hands it to the job's environment."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from app.models import Run
from app.settings import Settings
from tinygpt.run_config import OPTIONS

TEMPLATE = "job.sh.j2"
scripts = Environment(loader=FileSystemLoader(Path(__file__).parent), undefined=StrictUndefined,
                      keep_trailing_newline=True, autoescape=False)  # a shell script, not HTML: quoted below
scripts.filters["q"] = lambda value: shlex.quote(str(value))


def job_name(run_id: int) -> str:
    """The job's name on the cluster, which finds a run's job again (``squeue --name``)."""
    return f"tinygpt-run-{run_id}"


def train_command(run: Run, *, corpus: Path, settings: Settings) -> list[str]:
    """``python -m tinygpt train ...`` with the run's options (one torchrun over its GPUs when it has several)."""
    python = shlex.split(settings.slurm_python) if settings.slurm_python else [sys.executable]
    gpus = int(run.config.get("gpus", 1))
    device = "cuda" if settings.slurm_gres else run.requested_device
    trained = run.training_options
    options = {name: value for name, value in trained.items()  # those that change nothing in this run go unsaid
               if name in OPTIONS and name != "device" and OPTIONS[name].applies(trained)}
    launcher = (["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus}", "-m", "tinygpt"]
                if gpus > 1 else ["-m", "tinygpt"])
    return [*python, *launcher, "train", "--config", json.dumps(options, sort_keys=True, separators=(",", ":")),
            "--corpus", str(corpus), "--out", str(run.out_dir), "--device", device, "--no-progress",
            "--report-to", settings.slurm_report_url, "--report-run", str(run.id), "--scheduled",
            "--report-checkpoints", "best"]


def batch_script(run: Run, *, corpus: Path, settings: Settings) -> str:
    gpus = int(run.config.get("gpus", 1))
    return scripts.get_template(TEMPLATE).render(
        run=run, job_name=job_name(run.id), out_dir=run.out_dir, time_limit=run.time_limit or settings.slurm_time_limit,
        cpus_per_task=settings.slurm_cpus_per_task * (1 if settings.slurm_gres else gpus),
        partition=settings.slurm_partition, account=settings.slurm_account, qos=settings.slurm_qos,
        gres=f"{settings.slurm_gres}:{gpus}" if settings.slurm_gres else None,
        extra_lines=settings.slurm_sbatch_lines, setup=settings.slurm_setup,
        command=shlex.join(train_command(run, corpus=corpus, settings=settings)))
