"""Child processes that end with their parent: a worker started by ``tinygpt serve``, and every job.

A process killed with SIGKILL (a supervisor after its grace period, the OOM killer, a test's clean-up) runs
no clean-up of its own, so its children must notice for themselves. On Linux the kernel tells them
(``PR_SET_PDEATHSIG``: a signal when the parent dies); elsewhere a thread polls the parent's pid. Either
way the child gets SIGTERM, and stops as it does on a supervisor's SIGTERM: a worker asks its jobs to
checkpoint; a job stops at its next step boundary with ``last.pt`` saved and its run back in the queue.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading

PR_SET_PDEATHSIG = 1
POLL_SEC = 0.5


def end_with_parent(parent: int) -> None:
    """SIGTERM to this process once ``parent`` (the pid that started it) is gone; at once if it already is."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    else:
        threading.Thread(target=watch_parent, args=(parent,), name="parent-watch", daemon=True).start()
    if os.getppid() != parent:  # it died before the kernel was told: nobody will send the signal
        os.kill(os.getpid(), signal.SIGTERM)


def watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        threading.Event().wait(POLL_SEC)
    os.kill(os.getpid(), signal.SIGTERM)
