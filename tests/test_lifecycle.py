"""A run's life in one place (``app/services/lifecycle.py``): the table of transitions, over every pair of
statuses; what each change brings (its event, its alert, the figures stored at the end); every kind of run
built by ``new_run``. Against a real SQLite file."""

from __future__ import annotations

import itertools

import pytest
from sqlmodel import select

from app.db import init_db, session_scope
from app.models import Event, EventType, Metric, Run, RunKind, RunOrigin, RunStatus, WebhookDelivery
from app.services import lifecycle
from app.services.lifecycle import TRANSITIONS, IllegalTransition, change_status, claim, new_run
from app.settings import Settings

STATUSES = list(RunStatus)


@pytest.fixture
def settings(tmp_path):
    settings = Settings(home=tmp_path, webhook_urls=["https://hooks.example.com/every-alert"])
    init_db(settings)
    return settings


def a_run(session, status: RunStatus, origin: RunOrigin = RunOrigin.dashboard) -> Run:
    run = Run(name="r", config={"steps": 10, "resume": True}, status=status, origin=origin)
    session.add(run)
    session.flush()
    return run


def events_of(session, run_id: int, kind: EventType) -> list[dict]:
    return [e.data for e in session.exec(select(Event).where(Event.run_id == run_id, Event.type == kind)
                                         .order_by(Event.id))]


@pytest.mark.parametrize("before, after", list(itertools.product(STATUSES, STATUSES)))
def test_every_pair_of_statuses_is_allowed_exactly_as_the_table_says(settings, before, after):
    with session_scope(settings) as s:
        run = a_run(s, before)
        if after in TRANSITIONS[before]:
            change_status(s, run, after, settings=settings)
            assert run.status == after
            assert events_of(s, run.id, EventType.status)[-1]["status"] == after
        else:
            with pytest.raises(IllegalTransition) as refused:
                change_status(s, run, after, settings=settings)
            assert str(refused.value) == f"run {run.id} cannot go from {before} to {after}"
            assert run.status == before and events_of(s, run.id, EventType.status) == []


@pytest.mark.parametrize("before", STATUSES)
def test_a_reported_run_whose_trainer_resumes_runs_again(settings, before):
    with session_scope(settings) as s:
        run = a_run(s, before, RunOrigin.reported)
        if before in lifecycle.REPORTED_RESUMES or RunStatus.running in TRANSITIONS[before]:
            change_status(s, run, RunStatus.running, settings=settings)
            assert run.status == RunStatus.running
        else:
            with pytest.raises(IllegalTransition):
                change_status(s, run, RunStatus.running, settings=settings)


def test_an_end_stores_its_figures_alerts_first_and_then_says_its_status(settings):
    with session_scope(settings) as s:
        run = a_run(s, RunStatus.running)
        for step, rate in enumerate([100.0, 300.0, 200.0, 0.0]):  # 0: a row before any rate: not counted
            s.add(Metric(run_id=run.id, step=step, train_loss=5.0, lr=1e-3, tokens_per_sec=rate, elapsed_sec=step,
                         tokens_seen=step, epochs=0.0, peak_mem_mib=1.0))
        change_status(s, run, RunStatus.succeeded, settings=settings, stop_reason="stopped early at step 3")
        assert run.tokens_per_sec == 200.0
        kinds = [e.type for e in s.exec(select(Event).where(Event.run_id == run.id).order_by(Event.id))]
        assert kinds == [EventType.alert, EventType.status]
        assert events_of(s, run.id, EventType.alert)[0]["kind"] == "stopped_early"
        assert [d.url for d in s.exec(select(WebhookDelivery))] == ["https://hooks.example.com/every-alert"]


@pytest.mark.parametrize("status, origin, alert", [
    (RunStatus.succeeded, RunOrigin.dashboard, "finished"), (RunStatus.failed, RunOrigin.dashboard, "failed"),
    (RunStatus.crashed, RunOrigin.dashboard, "crashed"), (RunStatus.pruned, RunOrigin.dashboard, "pruned"),
    (RunStatus.cancelled, RunOrigin.dashboard, None), (RunStatus.queued, RunOrigin.dashboard, None),
    (RunStatus.succeeded, RunOrigin.imported, None),  # an imported run's end is history, not news
])
def test_which_ends_alert(settings, status, origin, alert):
    with session_scope(settings) as s:
        run = a_run(s, RunStatus.running, origin)
        change_status(s, run, status, settings=settings)
        assert [a["kind"] for a in events_of(s, run.id, EventType.alert)] == ([alert] if alert else [])


@pytest.mark.parametrize("kind, origin, status", [
    (RunKind.train, RunOrigin.dashboard, RunStatus.queued), (RunKind.benchmark, RunOrigin.dashboard, RunStatus.queued),
    (RunKind.train, RunOrigin.reported, RunStatus.running), (RunKind.train, RunOrigin.imported, RunStatus.running),
])
def test_every_kind_of_run_is_built_one_way(settings, kind, origin, status):
    with session_scope(settings) as s:
        run = new_run(s, name="n", config={"steps": 5}, settings=settings, kind=kind, origin=origin, status=status)
        assert run.out_dir == str(settings.runs_dir / str(run.id))
        assert [e["status"] for e in events_of(s, run.id, EventType.created)] == [status]
        assert [e["status"] for e in events_of(s, run.id, EventType.status)] == ([] if status == RunStatus.queued
                                                                                 else [status])
        with pytest.raises(IllegalTransition, match="^a new run cannot go from nothing to crashed$"):
            new_run(s, name="n", config={}, settings=settings, status=RunStatus.crashed)
        with pytest.raises(Exception, match="^steps must be at most 1000000$"):
            new_run(s, name="n", config={"steps": 2_000_000}, settings=settings)


def test_a_queued_run_is_claimed_once(settings):
    with session_scope(settings) as s:
        run_id = a_run(s, RunStatus.queued).id
    with session_scope(settings) as s:
        first = claim(s, run_id, worker="w1", host="h", slot="cpu")
        assert (first.status, first.worker, first.attempt) == (RunStatus.running, "w1", 1)
    with session_scope(settings) as s:
        assert claim(s, run_id, worker="w2", host="h", slot="cpu") is None
        assert [e["status"] for e in events_of(s, run_id, EventType.status)] == ["running"]


def test_a_crashed_run_is_requeued_while_attempts_remain(settings):
    with session_scope(settings) as s:
        run = a_run(s, RunStatus.running)
        run.attempt = 1
        assert lifecycle.requeue_crashed(s, run, message="worker gone", settings=settings) is True
        assert [e["status"] for e in events_of(s, run.id, EventType.status)] == ["crashed", "queued"]
        last = a_run(s, RunStatus.running)
        last.attempt = settings.max_attempts
        assert lifecycle.requeue_crashed(s, last, message="worker gone", settings=settings) is False
        assert last.status == RunStatus.crashed and last.error == "worker gone"
