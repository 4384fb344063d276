"""Cancelling a job: the interrupt lands at once, but never inside a database write."""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Iterator

import pytest
from sqlmodel import func, select

from app.db import init_db, session_scope
from app.models import Event, Metric, Run, RunStatus
from app.settings import Settings
from tinygpt import checkpoint
from tinygpt.checkpoint import read_checkpoint
from tinygpt.records import StepMetrics
from tinygpt.train import Trainer
from worker.cancel import SIGNAL, JobCancelled, cancel_interrupt
from worker.job import JobCallbacks, Outcome, finish


@pytest.fixture
def installed() -> Iterator[None]:
    previous = signal.getsignal(SIGNAL)
    cancel_interrupt.install()
    yield
    cancel_interrupt.close()
    signal.signal(SIGNAL, previous)


def spin(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pass


def test_fire_outside_a_shield_raises_in_the_main_thread_at_once(installed):
    t0 = time.monotonic()
    with pytest.raises(JobCancelled):  # the timer starts inside: on a busy machine it may fire before spin does
        threading.Timer(0.01, cancel_interrupt.fire).start()
        spin(5)
    assert time.monotonic() - t0 < 1


def test_fire_inside_a_shield_waits_for_its_end(installed):
    reached_end = False
    with pytest.raises(JobCancelled):
        with cancel_interrupt.shielded():
            with cancel_interrupt.shielded():  # nested: held until the outer one ends
                threading.Timer(0.01, cancel_interrupt.fire).start()
                spin(0.2)
            spin(0.05)
            reached_end = True
    assert reached_end


def fire_soon() -> threading.Event:
    """Fire the interrupt from another thread in 10 ms; the event is set once it has been fired."""
    fired = threading.Event()
    threading.Timer(0.01, lambda: (cancel_interrupt.fire(), fired.set())).start()
    return fired


def test_fire_after_close_is_ignored(installed):
    cancel_interrupt.close()
    fired = fire_soon()
    spin(0.2)
    assert fired.is_set() and not cancel_interrupt._pending  # fired, and nothing raised or held


def test_close_drops_an_interrupt_held_by_a_shield(installed):
    with cancel_interrupt.shielded():
        fired = fire_soon()
        spin(0.2)
        assert fired.is_set() and cancel_interrupt._pending  # held by the shield
        cancel_interrupt.close()  # the job is recording its end: the held cancel must not land now
    assert not cancel_interrupt._pending  # dropped: leaving the shield raised nothing


def metrics(step: int) -> StepMetrics:
    return StepMetrics(step=step, train_loss=5.0, val_loss=None, lr=1e-3, tokens_per_sec=1.0, elapsed_sec=0.0,
                       tokens_seen=step, epochs=0.0, peak_mem_mib=0.0)


def test_a_cancel_landing_during_metric_writes_leaves_the_database_usable(installed, database, tmp_path):
    """The job's callbacks write step after step; cancels fire at random moments. Each must end
    the loop, every step written must be whole (its metric row, run row and event together), and
    the job must then record ``cancelled``. (On PostgreSQL an interrupt inside a write once left
    the pooled connection mid-transaction, and recording the end failed.)"""
    settings = Settings(home=tmp_path, database_url=database.get("TINYGPT_DATABASE_URL"))
    init_db(settings)
    rng = random.Random(1337)
    for _trial in range(12):
        with session_scope(settings) as s:
            run = Run(name="cancel", config={}, status=RunStatus.running)
            s.add(run)
            s.flush()
            run_id = run.id
        cancel_interrupt.install()
        callbacks = JobCallbacks(run_id, settings)
        with pytest.raises(JobCancelled):
            threading.Timer(rng.uniform(0.01, 0.15), cancel_interrupt.fire).start()
            for step in range(1, 100_000):
                callbacks.on_step(metrics(step))
        cancel_interrupt.close()
        finish(run_id, run.attempt, Outcome(RunStatus.cancelled, "cancelled by request"), settings)
        with session_scope(settings) as s:
            run = s.get(Run, run_id)
            rows = s.exec(select(func.count(), func.max(Metric.step)).where(Metric.run_id == run_id)).one()
            events = s.exec(select(func.count()).select_from(Event).where(Event.run_id == run_id,
                                                                           Event.type == "metric")).one()
        assert (run.status, run.error) == (RunStatus.cancelled, "cancelled by request")
        assert rows[0] > 0 and rows == (run.last_step, run.last_step) and events == rows[0]


def test_a_cancel_landing_inside_a_checkpoint_write_waits_until_the_file_is_whole(installed, tmp_path, tiny_config,
                                                                                  cache_dir, monkeypatch):
    """A cancel fired while torch.save writes ``best.pt`` lands once the file is written and recorded: the
    run then ends cancelled, not failed (the interrupt once broke torch's zip writer: "unexpected pos")."""
    settings = Settings(home=tmp_path / "home")
    init_db(settings)
    with session_scope(settings) as s:
        run = Run(name="cancel-while-saving", config={}, status=RunStatus.running)
        s.add(run)
        s.flush()
        run_id = run.id
    real_save = checkpoint.torch.save
    fired = []

    def save_with_a_cancel(obj: object, f: object) -> None:
        if not fired and str(getattr(f, "name", "")).endswith(".pt.tmp"):  # the first checkpoint, while written
            cancel_interrupt.fire()
            fired.append(True)
            spin(0.05)
        real_save(obj, f)

    monkeypatch.setattr(checkpoint.torch, "save", save_with_a_cancel)
    out = tmp_path / "run"
    trainer = Trainer(tiny_config(steps=40, eval_every=5, eval_batches=2, sample_tokens=0), out,
                      callbacks=JobCallbacks(run_id, settings), cache_dir=cache_dir)
    with pytest.raises(JobCancelled):
        trainer.run()
    assert fired and sorted(p.name for p in out.glob("*.pt*")) == ["best.pt"]  # whole, no temporary left
    assert read_checkpoint(out / "best.pt")["train_state"]["step"] == 5
    with session_scope(settings) as s:
        assert (s.get(Run, run_id).best_step, s.get(Run, run_id).last_step) == (5, 5)  # recorded before it landed
