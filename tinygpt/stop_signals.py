"""SIGTERM and Ctrl-C that stop a loop by setting a :class:`threading.Event`, safely.

Python runs a signal handler in the main thread between two bytecodes, which can be while that thread
is inside the same event's ``wait`` and holds the event's internal lock. ``Event.set`` called there waits
for that lock, which its own thread holds: a deadlock (a worker whose ``tinygpt serve`` was killed hung
this way, with its warm job beside it). So the handler hands ``set`` to a short-lived thread, which takes
the lock as soon as the main thread lets go of it, a moment later.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def setter(event: threading.Event) -> Callable[[int, object], None]:
    """A signal handler that sets ``event`` without taking its lock in the interrupted thread."""

    def handle(signum: int, frame: object) -> None:
        threading.Thread(target=event.set, name=f"on-{signal.Signals(signum).name}", daemon=True).start()

    return handle


def set_on_signals(event: threading.Event, signals: Iterable[int] = STOP_SIGNALS) -> None:
    """From now on each of ``signals`` sets ``event`` (main thread only, as for any handler)."""
    handler = setter(event)
    for sig in signals:
        signal.signal(sig, handler)
