"""Long runs (issue 20): the block summaries kept as rows are written (known answers from the rows themselves,
through a resume), a thinned history read from them, the bounded event outbox, and its ``gap`` against a real
app: a client older than the outbox window is told to read the history again, and then has every row once."""

from __future__ import annotations

import math
import random
import time
from datetime import timedelta

import httpx
import pytest
from sqlalchemy import insert
from sqlmodel import Session, col, select

from app.db import init_db, session_scope
from app.models import Event, EventType, Metric, MetricBlock, Run, RunStatus, utcnow
from app.services.events import last_run_event_id, trimmed_beyond
from app.services.lifecycle import change_status
from app.services.metric_blocks import BLOCK_STEPS, level_for, rebuild_blocks
from app.services.metric_history import metric_columns
from app.services.outbox import compact_outbox
from app.services.run_records import record_metric, record_start
from app.settings import Settings

from .browser import needs_chromium, shot
from .service_helpers import AppServer, make_home, read_events

WINDOW_SEC = 2  # the test apps' event window: metric events leave the outbox after 2 s


def metric_row(step: int, rng: random.Random, eval_every: int = 500) -> dict:
    loss = 2.0 + 6.0 * math.exp(-step / 3000) + rng.uniform(-0.3, 0.3)
    return {"step": step, "train_loss": loss, "val_loss": loss + 0.1 if step % eval_every == 0 else None,
            "lr": 1e-3 * (1 + step % 7), "tokens_per_sec": 1000.0 + step, "elapsed_sec": step * 0.5,
            "tokens_seen": step * 4096, "epochs": step / 1000, "peak_mem_mib": 100.0 + step % 13}


@pytest.fixture
def settings(tmp_path, database_faults) -> Settings:
    settings = Settings(home=tmp_path, database_url=database_faults.get("TINYGPT_DATABASE_URL"))
    init_db(settings)
    return settings


def new_run(session: Session, steps: int) -> Run:
    run = Run(name="long", status=RunStatus.running, config={"preset": "tiny", "steps": steps})
    session.add(run)
    session.commit()
    return run


def expected_blocks(rows: list[dict]) -> set[tuple]:
    """The blocks, summed up here from the rows: (level, block, first, last, rows, lowest, highest)."""
    out = set()
    for level, size in enumerate(BLOCK_STEPS):
        by_block: dict[int, list[dict]] = {}
        for r in rows:
            by_block.setdefault(r["step"] // size, []).append(r)
        for block, members in by_block.items():
            losses = [m["train_loss"] for m in members]
            out.add((level, block, members[0]["step"], members[-1]["step"], len(members), min(losses), max(losses)))
    return out


def stored_blocks(session: Session, run_id: int) -> set[tuple]:
    return {(b.level, b.block, b.first_step, b.last_step, b.rows, b.min_train_loss, b.max_train_loss)
            for b in session.exec(select(MetricBlock).where(MetricBlock.run_id == run_id))}


def test_blocks_are_kept_as_rows_are_written_and_through_a_resume(settings):
    rng = random.Random(1)
    with session_scope(settings) as s:
        run = new_run(s, 9000)
        rows = [metric_row(step, rng) for step in range(0, 9000, 3)]
        for r in rows:
            record_metric(s, run, r, settings=settings)
        s.commit()
        assert stored_blocks(s, run.id) == expected_blocks(rows)
        # a resume from step 5,000: the rows after it go, the blocks holding them are summed up again
        record_start(s, run, {"start_step": 5000, "device": "cpu", "device_info": {}, "precision": "fp32",
                              "params": 1, "resumed": True})
        rows = [r for r in rows if r["step"] <= 5000] + [metric_row(step, rng) for step in range(5001, 7000, 2)]
        for r in rows:
            if r["step"] > 5000:
                record_metric(s, run, r, settings=settings)
        s.commit()
        assert stored_blocks(s, run.id) == expected_blocks(rows)
        rebuild_blocks(s, run_id=run.id)  # summed from the rows in one statement: the same
        s.commit()
        assert stored_blocks(s, run.id) == expected_blocks(rows)


def test_the_level_read_is_the_coarsest_that_fits_a_bucket():
    assert level_for(64 * 100 - 1, 100) is None and level_for(64 * 100, 100) == 0
    assert level_for(4096 * 100 - 1, 100) == 0 and level_for(4096 * 100, 100) == 1


@pytest.mark.parametrize("max_points", [10, 200, 2000])  # blocks of 4,096 steps, of 64, rows
def test_a_thinned_history_keeps_the_extremes_every_evaluation_and_logged_values(settings, max_points):
    rng = random.Random(2)
    rows = [metric_row(step, rng) for step in range(30_000)]
    with session_scope(settings) as s:
        run = new_run(s, 30_000)
        s.execute(insert(Metric), [{"run_id": run.id, **r} for r in rows])  # in bulk, as an import writes them
        rebuild_blocks(s, run_id=run.id)
        s.commit()
        for lo, hi in [(0, 29_999), (1234, 23_456)]:
            inside = rows[lo : hi + 1]
            got = metric_columns(s, run_id=run.id, from_step=lo, to_step=hi, max_points=max_points)
            c = got["columns"]
            assert (got["rows"], got["downsampled"]) == (len(inside), True)
            assert c["step"] == sorted(set(c["step"])) and c["step"][0] == lo and c["step"][-1] == hi
            evals = {r["step"]: r["val_loss"] for r in inside if r["val_loss"] is not None}
            assert {st: v for st, v in zip(c["step"], c["val_loss"], strict=True) if v is not None} == evals
            losses = [r["train_loss"] for r in inside]
            assert (min(c["train_loss"]), max(c["train_loss"])) == (min(losses), max(losses))
            by_step = {r["step"]: r for r in rows}
            for i, st in enumerate(c["step"]):  # the other fields as logged at that step, not averaged
                assert (c["lr"][i], c["tokens_seen"][i], c["peak_mem_mib"][i]) == (
                    by_step[st]["lr"], by_step[st]["tokens_seen"], by_step[st]["peak_mem_mib"])
            assert len(c["step"]) <= max_points + len(evals) + 2


def metric_event_ids(session: Session, run_id: int) -> list[int]:
    return list(session.exec(select(Event.id).where(Event.run_id == run_id, Event.type == EventType.metric)
                             .order_by(col(Event.id))))


def test_the_outbox_keeps_a_window_of_metric_events_and_the_other_events(settings):
    rng = random.Random(3)
    with session_scope(settings) as s:
        run = new_run(s, 100)
        for step in range(100):
            record_metric(s, run, metric_row(step, rng), settings=settings)
            s.commit()
            if step == 59:
                time.sleep(0.01)
                cutoff = utcnow()
        newest_old = metric_event_ids(s, run.id)[59]
        assert compact_outbox(s, written_before=cutoff) == 60  # the events of rows 0-59
        s.refresh(run)
        assert run.events_trimmed_to == newest_old and len(metric_event_ids(s, run.id)) == 40
        assert min(metric_event_ids(s, run.id)) > newest_old
        assert metric_columns(s, run_id=run.id)["rows"] == 100  # the rows all stay
        change_status(s, run, RunStatus.succeeded, settings=settings, finished_at=utcnow())
        s.commit()
        assert compact_outbox(s, written_before=utcnow() + timedelta(seconds=1)) == 40
        assert metric_event_ids(s, run.id) == []
        statuses = s.exec(select(Event.type).where(Event.run_id == run.id, Event.type == EventType.status)).all()
        assert statuses == [EventType.status]  # the other events stay


def test_a_history_read_after_the_newest_rows_left_the_outbox_streams_on_without_another_gap(settings):
    """The run's newest events are metric events the outbox deleted (its newest kept one is an ``overfit`` from
    step 10): the history stands for the deleted ones too, so a stream from it has no gap to report."""
    rng = random.Random(6)
    with session_scope(settings) as s:
        run = new_run(s, 20)
        for step in range(20):
            record_metric(s, run, metric_row(step, rng, eval_every=10), settings=settings)
        s.commit()
        newest_metric = metric_event_ids(s, run.id)[-1]
        assert compact_outbox(s, written_before=utcnow() + timedelta(seconds=1)) == 20
        s.refresh(run)
        assert last_run_event_id(s, run_id=run.id) < newest_metric == run.events_trimmed_to
        history = metric_columns(s, run_id=run.id)
        assert history["last_event_id"] == newest_metric and history["rows"] == 20
        assert trimmed_beyond(s, run_id=run.id, after_id=history["last_event_id"]) is None


@pytest.fixture
def windowed_app(tmp_path, slice_path, warm_cache):
    home = make_home(tmp_path, slice_path, warm_cache, TINYGPT_EVENT_WINDOW_SEC=WINDOW_SEC)
    app = AppServer(home)
    yield home, app
    app.stop()


def report(c: httpx.Client, run_id: int, first_seq: int, items: list[tuple[str, dict]]) -> int:
    body = {"items": [{"seq": first_seq + i, "kind": kind, "data": data} for i, (kind, data) in enumerate(items)]}
    response = c.post(f"/api/runs/{run_id}/report", json=body)
    assert response.status_code == 200 and response.json()["applied_seq"] == first_seq + len(items) - 1, response.text
    return first_seq + len(items)


def test_a_client_older_than_the_window_gets_a_gap_then_every_row_once(windowed_app):
    home, app = windowed_app
    rng = random.Random(4)
    rows = [metric_row(step, rng, eval_every=10) for step in range(60)]
    with app.client() as c:
        run_id = c.post("/api/runs/reported", json={"report_id": "ab" * 8, "name": "far away",
                                                    "config": {"preset": "tiny", "steps": 59}}).json()["id"]
        seq = report(c, run_id, 1, [("metric", r) for r in rows[:5]])
        url = f"{app.url}/api/runs/{run_id}/events"
        seen = c.get(f"/api/runs/{run_id}/metrics", params={"format": "columns"}).json()["last_event_id"]
        seq = report(c, run_id, seq, [("metric", r) for r in rows[5:]])
        seq = report(c, run_id, seq, [("status", {"status": "succeeded"})])
        time.sleep(WINDOW_SEC + 1.5)  # the window moves past `seen`
        # a client that last saw `seen`: told to read the history again, and the stream ends there
        assert [e["event"] for e in read_events(url, last_event_id=seen, timeout=30)] == ["gap"]
        assert [e["event"] for e in read_events(url, timeout=30)] == ["gap"]  # one that asks for everything
        history = c.get(f"/api/runs/{run_id}/metrics", params={"format": "columns"}).json()
        again = read_events(f"{url}?history={history['last_event_id']}", last_event_id=seen, timeout=30)
    assert history["columns"]["step"] == list(range(60))
    kinds = [e["event"] for e in again]
    assert "metric" not in kinds  # no metric event: the history has every row
    assert kinds.count("overfit") == 5 and kinds[-3:] == ["alert", "status", "end"]  # a verdict per evaluation since
    with session_scope(Settings(home=home.path)) as s:
        assert metric_event_ids(s, run_id) == []  # one stored copy of each metric: its row
        assert s.get(Run, run_id).events_trimmed_to >= seen
        assert len(stored_blocks(s, run_id)) == 2  # steps 0-59: one block of each level
    assert httpx.delete(f"{app.url}/api/runs/{run_id}", timeout=30).status_code == 204
    with session_scope(Settings(home=home.path)) as s:
        assert stored_blocks(s, run_id) == set()  # gone with the run


# -- pages: the history first, then the stream from where it ends (Chromium) ------------------------------------
def overfitting_rows(n: int, best: int, eval_every: int = 500) -> list[dict]:
    """``n`` rows whose validation loss is lowest at step ``best``, then climbs."""
    rng = random.Random(5)
    rows = [metric_row(step, rng, eval_every) for step in range(n)]
    for r in rows:
        if r["val_loss"] is not None:
            r["val_loss"] = 2.5 + abs(r["step"] - best) / n
    return rows


@needs_chromium
@pytest.mark.slow  # 100,000 rows imported and shown: 20 s
def test_a_100k_row_run_page_shows_its_last_step_and_best_validation_point(windowed_app, page):
    _, app = windowed_app
    rows = overfitting_rows(100_000, best=40_000)
    body = {"name": "100k", "device": "cuda", "precision": "bf16", "device_info": {"name": "NVIDIA H200"},
            "config": {"preset": "holmes", "steps": 99_999, "eval_every": 500}, "metrics": rows}
    response = httpx.post(f"{app.url}/api/runs/import", json=body, timeout=300)
    assert response.status_code == 201, response.text
    page.goto(f"{app.url}/runs/{response.json()['id']}")
    page.wait_for_function("window.runState && window.runState.ended && "
                           "document.getElementById('progress-text').textContent === '99999 / 99999'", timeout=60_000)
    assert page.evaluate("window.runState.downsampled") is True
    assert page.evaluate("window.runState.rows.length") < 5000  # thinned by the server, not 100,000 objects
    best = page.evaluate("""() => { const u = window.runState.charts.loss;
        const at = u.data[4].flatMap((v, i) => (v != null ? [[u.data[0][i], v]] : [])); return at; }""")
    assert best == [[40_000, 2.5]]  # the best-validation point, drawn once, where it is
    assert page.inner_text("#banner").startswith("Overfitting since step 40500; best checkpoint is step 40000")
    shot(page, "run-100k-rows")
    # zoomed in: the range read again at full resolution (every row of it)
    page.evaluate("window.runState.charts.loss.setSelect({left: 0, top: 0, width: 0, height: 0}, false)")
    box = page.locator("#loss-chart .u-over").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.40, box["y"] + 50)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.405, box["y"] + 50, steps=5)
    page.mouse.up()
    page.wait_for_function("window.runState.zoom !== null")
    zoom = page.evaluate("[window.runState.zoom.from, window.runState.zoom.to, window.runState.zoom.rows.length]")
    assert zoom[2] == zoom[1] - zoom[0] + 1 and zoom[2] > 100  # every step of the range
    assert page.is_visible("#zoom-reset")
    shot(page, "run-100k-rows-zoomed")
    # the view is in the address: a copied link opens the same zoomed range, x-axis and smoothing
    page.select_option("#x-axis", "tokens_seen")
    page.fill("#smoothing", "0.5")
    page.dispatch_event("#smoothing", "input")
    link = page.url
    assert f"zoom={zoom[0]},{zoom[1]}" in link and "x=tokens_seen" in link and "smooth=0.5" in link
    again = page.context.new_page()
    again.goto(link)
    again.wait_for_function("window.runState && window.runState.zoom !== null", timeout=60_000)
    assert again.evaluate("[window.runState.zoom.from, window.runState.zoom.to, window.runState.zoom.rows.length]") \
        == zoom
    assert (again.input_value("#x-axis"), again.input_value("#smoothing")) == ("tokens_seen", "0.5")
    again.close()
    page.click("#zoom-reset")
    assert page.evaluate("window.runState.zoom") is None
    assert "zoom=" not in page.url


@needs_chromium
@pytest.mark.slow  # an app restart under a live page: 25 s
def test_a_live_page_opened_late_shows_every_step_once_after_the_window_moved_on(windowed_app, page):
    """History then live, through an app restart after which the rows the page missed have left the outbox:
    the page reads the history again (a ``gap``) and shows every step once."""
    home, app = windowed_app
    rows = overfitting_rows(150, best=60, eval_every=10)
    with app.client() as c:
        run_id = c.post("/api/runs/reported", json={"report_id": "cd" * 8, "name": "live far away",
                                                    "config": {"preset": "tiny", "steps": 149}}).json()["id"]
        seq = report(c, run_id, 1, [("metric", r) for r in rows[:60]])
    page.goto(f"{app.url}/runs/{run_id}")
    page.wait_for_function("window.runState && window.runState.loaded && window.runState.rows.length === 60")
    with app.client() as c:
        seq = report(c, run_id, seq, [("metric", r) for r in rows[60:80]])  # live
    page.wait_for_function("window.runState.rows.length === 80")
    # the app goes away; the page's reconnections are refused until the rows it missed left the outbox
    page.route("**/api/runs/*/events*", lambda route: route.abort())
    app.signal(9)
    app.popen.wait()
    app = AppServer(home, port=app.port)
    windowed_app[1].popen = app.popen  # the fixture stops the app that runs now, even if the test fails
    with app.client() as c:
        seq = report(c, run_id, seq, [("metric", r) for r in rows[80:130]])
    time.sleep(WINDOW_SEC + 1.5)  # the rows the page missed leave the outbox
    page.unroute("**/api/runs/*/events*")
    page.wait_for_function("window.runState.gaps === 1 && window.runState.rows.length === 130", timeout=30_000)
    with app.client() as c:
        report(c, run_id, seq, [("metric", r) for r in rows[130:]] + [("status", {"status": "succeeded"})])
    page.wait_for_function("window.runState.ended", timeout=30_000)
    assert page.evaluate("window.runState.rows.map(r => r.step)") == list(range(150))  # each once, none missing
    received = [i for i in page.evaluate("window.runState.received") if i]
    assert len(received) == len(set(received))
    assert page.evaluate("window.runState.overfit.best_step") == 60  # the server's verdict, drawn
    assert page.evaluate("window.runState.gaps") == 1  # the history read again once, not in a loop
    page.js_errors[:] = [e for e in page.js_errors if "ERR_FAILED" not in e and "ERR_CONNECTION_REFUSED" not in e
                         and "ERR_INCOMPLETE_CHUNKED_ENCODING" not in e]
