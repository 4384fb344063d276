"""A warm job process, ``python -m worker.warm``: the worker starts one per device slot ahead of its next run.

It imports the job's modules and pays torch's first-use costs
(``tinygpt.train.warm_up``) at the lowest CPU priority, so that a run training beside it keeps the cores: on
2 cores, an import at equal priority made the running job's 10 steps and 2 evaluations 6 times slower. Then it
waits for the run the worker hands it on stdin (``RUN_ID ATTEMPT``), takes its normal priority back and runs
it as ``python -m worker.job RUN_ID ATTEMPT`` would.

The lowest priority, on Linux: the warm-up thread's own nice value (threads have their own there), and, where
the kernel schedules by session (autogroup, the default on most distributions: then nice values count only
within a session, and each job is a session of its own), the session's nice value, set back to 0 for the run.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
import time
from pathlib import Path
from typing import NoReturn

LOWEST_PRIORITY = 19  # the highest nice value
SESSION_PRIORITY = Path("/proc/self/autogroup")  # this session's nice value, where the kernel has autogroups
prepared = threading.Event()  # set once the warm-up thread has done all of it (a failure there is printed)


def set_session_priority(nice: int) -> None:
    """This session's nice value (0 or more needs no privilege; the kernel takes one such change in 0.1 s from
    anyone, so a busy moment waits)."""
    for _ in range(50):
        try:
            SESSION_PRIORITY.write_text(str(nice))
            return
        except OSError as exc:
            if exc.errno != errno.EAGAIN:
                raise
            time.sleep(0.02)
    raise TimeoutError(f"{SESSION_PRIORITY}: nice {nice} not taken within a second")


def prepare(*, lower_this_thread: bool) -> None:
    """The warm-up thread: import the job and pay its first-use costs; ``lower_this_thread``: at the lowest
    priority (Linux: a thread's nice value is its own, and the threads it starts inherit it)."""
    if lower_this_thread:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOWEST_PRIORITY)
    from tinygpt.train import warm_up

    from . import job  # noqa: F401  the job's modules, imported here rather than when its run arrives

    warm_up()
    prepared.set()


def handed_run() -> list[str] | None:
    """Prepare at the lowest priority while waiting for ``RUN_ID ATTEMPT`` from the worker; once it comes, the
    normal priority back (the session's: a thread's cannot be raised again without privilege, so where the
    thread's was lowered, an early run waits on a low-priority import) and the preparation finished.
    Stdin closed without a run (the worker stopping): None."""
    by_session = SESSION_PRIORITY.exists()
    if by_session:
        set_session_priority(LOWEST_PRIORITY)
    preparing = threading.Thread(target=prepare, kwargs={"lower_this_thread": sys.platform == "linux" and
                                                         not by_session}, name="warm-up", daemon=True)
    preparing.start()
    line = sys.stdin.readline()
    if not line.strip():
        return None
    if by_session:
        set_session_priority(0)
    preparing.join()
    return line.split()


def main() -> NoReturn:
    argv = handed_run()
    from .job import EXIT_OK, exit_at_once
    from .job import main as run_job

    exit_at_once(EXIT_OK if argv is None else run_job(argv))


if __name__ == "__main__":
    main()
