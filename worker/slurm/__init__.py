"""The Slurm executor: runs of the ``slurm`` pool become batch jobs on a Slurm cluster.

``executor.py`` (the ``tinygpt slurm-executor`` process: submits queued runs, follows their jobs, cancels),
``batch_script.py`` + ``job.sh.j2`` (the script each job runs: ``tinygpt train --report-to`` with a
run-scoped token), ``scheduler.py`` (``sbatch``, ``squeue``, ``scontrol``, ``scancel``), ``job_states.py``
(Slurm's job states onto the run's statuses). The trainer on the node reports through the reporting API
(``app/api/reports.py``), as ``tinygpt train --report-to`` does from any machine.
"""
