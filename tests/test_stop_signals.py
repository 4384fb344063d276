"""A stop signal sets its event even when it lands while the main thread is inside that event's ``wait``."""

from __future__ import annotations

import signal
import threading

import pytest

from tinygpt.stop_signals import set_on_signals


@pytest.fixture
def usr2_restored():
    before = signal.getsignal(signal.SIGUSR2)
    yield signal.SIGUSR2
    signal.signal(signal.SIGUSR2, before)


def test_a_signal_landing_inside_the_events_own_wait_sets_it_once_the_wait_lets_go(usr2_restored):
    stop = threading.Event()
    set_on_signals(stop, [usr2_restored])
    landed = threading.Event()
    with stop._cond:  # where the main thread is for a few bytecodes of `stop.wait()`: holding the event's lock
        signal.raise_signal(usr2_restored)  # the handler runs here, in this thread; `stop.set()` here never returns
        landed.set()
        assert not stop.is_set()
    assert landed.is_set() and stop.wait(timeout=5)


def test_each_stop_signal_sets_the_event(usr2_restored):
    stop = threading.Event()
    set_on_signals(stop, [usr2_restored])
    signal.raise_signal(usr2_restored)
    assert stop.wait(timeout=5)
