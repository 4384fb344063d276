"""A run that goes wrong stops itself and tells you: the NaN guard, early stopping, stalled runs and
webhooks, end to end with the real app and worker processes and a real HTTP receiver."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys

import httpx
import pytest

from worker.notifier import WEBHOOK_ATTEMPTS

from .service_helpers import ROOT, AppServer, Worker, free_port, make_home, read_events, wait_for
from .webhook_receiver import Receiver

TOKEN = "alerts-test-token-3b1f"
PUBLIC = "http://dash.example:8000"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BASE = {"preset": "tiny", "device": "cpu", "precision": "fp32", "batch_size": 4, "threads": 1, "eval_batches": 2,
        "sample_tokens": 0}
# fp16 at lr 1: the forward pass overflows within the warm-up (step ~20 here), after the first evaluations
DIVERGES = {**BASE, "precision": "fp16", "lr": 1.0, "warmup": 100, "steps": 200, "eval_every": 5, "batch_size": 8,
            "vocab_size": 512}


LOCAL_RECEIVERS = '["127.0.0.1"]'  # the tests' receivers listen on loopback: allowed, as an operator would


@pytest.fixture(scope="module")
def receiver():
    r = Receiver()
    yield r
    r.stop()


@pytest.fixture(scope="module")
def service(tmp_path_factory, slice_path, warm_cache, receiver):
    home = make_home(tmp_path_factory.mktemp("alerts"), slice_path, warm_cache, TINYGPT_API_TOKEN=TOKEN, TINYGPT_WARM_JOBS="true",
                     TINYGPT_WEBHOOK_URLS=json.dumps([f"{receiver.url}/hook"]), TINYGPT_PUBLIC_URL=PUBLIC,
                     TINYGPT_WEBHOOK_ALLOW=LOCAL_RECEIVERS,
                     TINYGPT_STALL_AFTER_SEC="3")
    app = AppServer(home)
    worker = Worker(home, "alerts")
    yield home, app, worker
    worker.stop()
    app.stop()


def client(app: AppServer) -> httpx.Client:
    return httpx.Client(base_url=app.url, timeout=30, headers=AUTH)


def run_to_end(app: AppServer, c: httpx.Client, **options) -> tuple[dict, list[dict]]:
    response = c.post("/api/runs", json=options)
    assert response.status_code == 201, response.text
    run_id = response.json()[0]["id"]
    events = read_events(f"{app.url}/api/runs/{run_id}/events", timeout=300, headers=dict(c.headers))
    return c.get(f"/api/runs/{run_id}").json(), events


def alert_ids(events: list[dict]) -> list[int]:
    return [e["id"] for e in events if e["event"] == "alert"]


def assert_told_once(receiver: Receiver, events: list[dict]) -> None:
    """Every alert on the run's stream reached the receiver exactly once, and nothing else for the run."""
    run_id = next(e["data"]["run_id"] for e in events if e["event"] == "alert")
    got = wait_for(lambda: sorted(b["id"] for b in receiver.bodies(run_id=run_id)) == sorted(alert_ids(events)) or None,
                   timeout=30, message=f"webhooks {alert_ids(events)} for run {run_id}")
    assert got


@pytest.mark.slow  # 22 s on 2 cores; the guard itself stays in the default suite (tests/test_guards.py)
def test_a_diverging_run_fails_naming_its_step_and_keeps_its_best_checkpoint(service, receiver):
    home, app, _ = service
    with client(app) as c:
        run, events = run_to_end(app, c, **DIVERGES, name="diverges")
        assert run["status"] == "failed", run
        story = re.fullmatch(r"(loss|gradient norm|validation loss|evaluation's train loss) became (NaN|infinite) at "
                             r"step (\d+) \(last finite train loss [\d.]+ at step (\d+)\); best checkpoint kept "
                             r"\(step (\d+), val [\d.]+\)", run["error"])
        assert story, run["error"]
        assert int(story.group(5)) == run["best_step"] > 0 and int(story.group(3)) < DIVERGES["steps"]
        assert run["has_checkpoint"]
        body = {"prompt": "Holmes", "max_tokens": 8, "seed": 1}
        sample = c.post(f"/api/runs/{run['id']}/sample", json=body)
        assert sample.status_code == 200 and "event: end" in sample.text and "event: error" not in sample.text
    assert_told_once(receiver, events)
    (told,) = receiver.bodies(run_id=run["id"], kind="nonfinite_loss")
    assert told["message"] == f"failed at step {run['last_step']}: {run['error']}"
    assert told["url"] == f"{PUBLIC}/runs/{run['id']}" and told["text"].endswith(told["url"])
    assert told["text"].startswith(f"TinyGPT: run {run['id']} (diverges): nonfinite loss. failed at step")
    assert told["run"]["status"] == "failed" and told["run"]["best_step"] == run["best_step"]
    post = next(p for p in receiver.posts if p["body"]["id"] == told["id"])
    assert TOKEN not in post["raw"] and "authorization" not in post["headers"] and "cookie" not in post["headers"]
    assert post["headers"]["x-tinygpt-event"] == str(told["id"]) and post["path"] == "/hook"


def test_early_stopping_ends_the_run_succeeded_with_its_reason(service, receiver):
    home, app, _ = service
    with client(app) as c:
        run, events = run_to_end(app, c, **BASE, steps=40, eval_every=5, lr=1e-7, early_stop_patience=2,
                                 early_stop_min_delta=0.01, name="patience")
        listed = c.get("/api/runs", params={"limit": 5}).json()["items"]
    assert run["status"] == "succeeded" and run["last_step"] == 10 and run["steps"] == 40
    assert run["stop_reason"] == (f"stopped early at step 10: validation loss has not improved by 0.01 for 2 evaluations; "
                                  f"best step {run['best_step']} (val {run['best_val_loss']:.2f})")
    assert next(r for r in listed if r["id"] == run["id"])["stop_reason"] == run["stop_reason"]
    status = [e["data"] for e in events if e["event"] == "status"][-1]
    assert status["stop_reason"] == run["stop_reason"]  # the page's banner, live
    assert_told_once(receiver, events)
    (told,) = receiver.bodies(run_id=run["id"])
    assert told["kind"] == "stopped_early" and told["message"] == run["stop_reason"]


def job_pid(home, run_id: int) -> int:
    with sqlite3.connect(home.path / "tinygpt.db") as db:
        return db.execute("select pid from runs where id = ?", (run_id,)).fetchone()[0]


@pytest.mark.slow  # 11 s on 2 cores (a SIGSTOP held past the stall limit)
def test_a_stopped_job_shows_as_stalled_and_clears_when_it_moves_again(service, receiver):
    home, app, _ = service
    with client(app) as c:
        run_id = c.post("/api/runs", json={**BASE, "steps": 100_000, "eval_every": 50_000, "name": "stalls"}).json()[0]["id"]
        wait_for(lambda: c.get(f"/api/runs/{run_id}").json()["last_step"] >= 20, timeout=120, message="steps")
        pid = job_pid(home, run_id)
        os.kill(pid, signal.SIGSTOP)
        try:
            # the limit is max(3 s, 10 x a step of ~0.05 s), checked at each worker heartbeat (0.5 s)
            stalled = wait_for(lambda: c.get(f"/api/runs/{run_id}").json()["stalled_at"], timeout=15,
                               message="stalled")
            assert stalled
            assert [r["id"] for r in c.get("/api/runs", params={"stalled": True}).json()["items"]] == [run_id]
            assert c.get(f"/api/runs/{run_id}").json()["status"] == "running"  # alive: never reaped as crashed
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_for(lambda: c.get(f"/api/runs/{run_id}").json()["stalled_at"] is None, timeout=15, message="cleared")
        assert c.get("/api/runs", params={"stalled": True}).json()["items"] == []
        c.post(f"/api/runs/{run_id}/cancel")
        events = read_events(f"{app.url}/api/runs/{run_id}/events", timeout=60, headers=AUTH)
    stalls = [e["data"] for e in events if e["event"] == "stall"]
    assert [s["stalled"] for s in stalls] == [True, False]
    assert stalls[0]["message"].startswith("no step for ") and "its job is alive" in stalls[0]["message"]
    assert_told_once(receiver, events)
    assert [b["kind"] for b in receiver.bodies(run_id=run_id)] == ["stalled"]  # cancelled: nobody to tell


def test_bad_webhook_urls_are_refused_naming_them(service, tmp_path):
    home, app, _ = service
    with client(app) as c:
        for notify, loc, message in [
            ({"urls": ["file:///etc/passwd"]}, ["body", "notify", "urls", 0], "webhook URLs must be http or https"),
            ({"urls": ["not a url"]}, ["body", "notify", "urls", 0], "Input should be a valid URL"),
            ({"events": ["exploded"]}, ["body", "notify", "events", 0], "Input should be 'finished'"),
        ]:
            response = c.post("/api/runs", json={**BASE, "steps": 5, "eval_every": 5, "notify": notify})
            assert response.status_code == 422, response.text
            (error,) = response.json()["detail"]
            assert error["loc"] == loc and message in error["msg"], error
    env = {**home.env(), "TINYGPT_WEBHOOK_URLS": '["ftp://files.example/hook"]'}
    proc = subprocess.run([sys.executable, "-m", "app.cli", "app", "--port", str(free_port())], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("tinygpt: error: TINYGPT_WEBHOOK_URLS: webhook URLs must be http or https, "
                                   "got 'ftp://files.example/hook'")


@pytest.mark.slow  # 60 s on 2 cores: two apps and two workers in turn, a receiver answering 503 three times
def test_each_alert_is_sent_once_across_restarts_and_a_dead_receiver_costs_nothing(tmp_path, slice_path, warm_cache):
    """Alerts pending while their worker stops are sent once by the next; nothing sent is sent again."""
    receiver = Receiver()  # its own: the module's receiver also hears the other tests' runs, whose ids are these
    dead = f"http://127.0.0.1:{free_port()}/nobody-listens"
    home = make_home(tmp_path, slice_path, warm_cache, TINYGPT_WEBHOOK_URLS=json.dumps([f"{receiver.url}/restart"]),
                     TINYGPT_WEBHOOK_ALLOW=LOCAL_RECEIVERS)
    app, worker = AppServer(home), Worker(home, "first")
    try:
        with app.client() as c:
            receiver.fail_next = 3  # the receiver is down for the first tries: the delivery waits, with backoff
            first, events_1 = run_to_end(app, c, **BASE, steps=10, eval_every=5, notify={"urls": [dead]})
            worker.stop()
            app.stop()
            app, worker = AppServer(home), Worker(home, "second")
        with app.client() as c:
            second, events_2 = run_to_end(app, c, **BASE, steps=10, eval_every=5)
        assert first["status"] == second["status"] == "succeeded"
        assert_told_once(receiver, events_1)
        assert_told_once(receiver, events_2)

        def deliveries() -> list[tuple[str, str, int]]:
            with sqlite3.connect(home.path / "tinygpt.db") as db:
                return db.execute("select url, state, attempts from webhook_deliveries order by id").fetchall()

        def settled() -> list[tuple[str, str, int]] | None:
            # a delivery is "sending" from its compare-and-set to its answer being recorded (the receiver may have
            # it already); the dead receiver's is "sending" for the instant of each retry, "pending" in between, and
            # "failed" once it has had all its tries (2 + 4 + ... + 32 s: a slow machine may get there)
            found = deliveries()
            return found if [state for _, state, _ in found] in (["sent", s, "sent"] for s in ("pending", "failed")) \
                else None

        try:
            rows = wait_for(settled, timeout=10, message="the deliveries to settle")
        except TimeoutError:
            pytest.fail(f"deliveries: {deliveries()}")
        # the first delivery met the first 503 and was retried; the second run's may have met the last ones
        # (it is sent while the first backs off), so the three refusals are counted over both
        assert rows[0][:2] == rows[2][:2] == (f"{receiver.url}/restart", "sent")
        assert rows[0][2] >= 2 and rows[0][2] + rows[2][2] == 3 + 2  # 3 answers of 503, then one success each
        # the dead receiver's: tried, waiting for its next try (or given up after all of them), the run unharmed
        url, state, attempts = rows[1]
        assert url == dead and (1 <= attempts < WEBHOOK_ATTEMPTS if state == "pending" else attempts == WEBHOOK_ATTEMPTS)
        assert "cannot connect" in worker.output() or "cannot connect" in (home.path / "worker-first.log").read_text()
    finally:
        worker.stop()
        app.stop()
        receiver.stop()
