"""Cancelling a job at once, without breaking a database or checkpoint write.

A cancel interrupts the job's main thread wherever it is (mid-step, mid-evaluation), so that
a long CPU step does not make the user wait; but an interrupt that lands inside a database write
leaves the connection mid-transaction (on PostgreSQL the pool then hands out a connection
that refuses every statement, and the job cannot record that it was cancelled); one inside
``torch.save`` breaks the checkpoint's zip writer (the job's ``Callbacks.writing`` shields it). So the
interrupt is decided in the main thread itself, by a signal handler: inside a ``shielded()``
section it is held until the section ends; after ``close()`` it is ignored.

    cancel_interrupt.install()                  # in the job's main thread
    with cancel_interrupt.shielded(), session_scope() as s:
        ...                                     # never interrupted half-way
    cancel_interrupt.fire()                     # from the watcher thread: JobCancelled in the main thread

Like the signal handler behind it, there is one per process: ``cancel_interrupt``.
"""

from __future__ import annotations

import _thread
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

# Not a real signal from outside: ``_thread.interrupt_main(SIGNAL)`` runs its Python handler in the
# main thread. SIGUSR1 is faulthandler's (``kill -USR1 PID`` prints where the job is).
SIGNAL = signal.SIGUSR2


class JobCancelled(BaseException):
    """Raised in the job's main thread when its run is cancelled (a BaseException: ``except
    Exception`` in the training code does not catch it)."""


class CancelInterrupt:
    """Delivers a cancel to the main thread as :class:`JobCancelled`, except inside shielded sections.

    All its state is read and written by the main thread only (the handler runs there), so it
    needs no lock and has no window between deciding and raising.
    """

    def __init__(self) -> None:
        self._depth = 0
        self._pending = False
        self._closed = False

    def install(self) -> None:
        """Handle the interrupt from now on (main thread only); until then ``fire`` does nothing."""
        self._depth, self._pending, self._closed = 0, False, False
        signal.signal(SIGNAL, self._handle)

    def fire(self) -> None:
        """Ask for the interrupt (any thread); the main thread decides when it lands."""
        _thread.interrupt_main(SIGNAL)

    def close(self) -> None:
        """From now on, ignore interrupts (the job is recording how it ended)."""
        self._closed = True
        self._pending = False

    @contextmanager
    def shielded(self) -> Iterator[None]:
        """A section no interrupt breaks into; one that came meanwhile is raised as it ends."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
        if self._pending and self._depth == 0 and not self._closed:
            self._pending = False
            raise JobCancelled

    def _handle(self, _signum: int, _frame: FrameType | None) -> None:
        if self._closed:
            return
        if self._depth:
            self._pending = True
            return
        raise JobCancelled


cancel_interrupt = CancelInterrupt()
