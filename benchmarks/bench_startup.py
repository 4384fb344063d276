"""Start-up of short runs, where the user sees it: a fresh ``tinygpt serve`` (the app and one worker, the product's
own settings: warm job processes, its polling intervals), 4-step tiny runs submitted one after another, on the Holmes corpus (tokenizer and encoded corpus made by a first run).

For each run: submission -> its first ``metric`` event received on its stream (what the run page draws first),
and submission -> the stream's end (its final status). Where the seconds go: the run's events (``created``, its
``status`` running, ``resolved``, the first ``metric``, ``succeeded``), timed by the database's clock.

    python -m benchmarks.bench_startup [--runs 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from app.settings import Settings

from .common import ROOT, holmes_path

sys.path.insert(0, str(ROOT))
from tests.service_helpers import Home, Serve  # noqa: E402

FOUR_STEPS = {"preset": "tiny", "device": "cpu", "steps": 4, "name": "start-up"}
#: The product's defaults for what the test homes tune (tests/service_helpers.py): a user's `tinygpt serve`.
SERVED = {f"TINYGPT_{name.upper()}": str(Settings.model_fields[name].default)
          for name in ("heartbeat_sec", "stale_after_sec", "worker_poll_sec", "event_poll_sec", "warm_jobs")}


def timeline(settings: Settings, run_id: int) -> dict[str, float]:
    """Seconds from the run's ``created`` event to its first ``running`` status, ``resolved``, first ``metric``
    and its end (the events' database times: what the job did, not what a client saw)."""
    from datetime import datetime

    from sqlmodel import select

    from app.db import session_scope
    from app.models import Event

    marks: dict[str, float] = {}
    with session_scope(settings) as s:
        events = s.exec(select(Event).where(Event.run_id == run_id).order_by(Event.id)).all()
    t0: datetime = events[0].created_at
    for e in events:
        name = e.data.get("status") if e.type == "status" else e.type
        if name in ("running", "resolved", "metric", "succeeded") and name not in marks:
            marks[name] = round((e.created_at - t0).total_seconds(), 3)
    return marks


def one_run(c: httpx.Client, settings: Settings) -> dict:
    """Submit a run and follow its event stream as the run page does: the first ``metric`` event and the
    stream's end (its final status) as they arrive here, with no polling load on the app."""
    t0 = time.perf_counter()
    run_id = c.post("/api/runs", json=FOUR_STEPS).json()[0]["id"]
    first_metric = end = None
    with c.stream("GET", f"/api/runs/{run_id}/events", timeout=120) as stream:
        event = None
        for line in stream.iter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line == "" and event:
                if event == "metric" and first_metric is None:
                    first_metric = time.perf_counter() - t0
                if event == "end":
                    end = time.perf_counter() - t0
                    break
                event = None
    status = c.get(f"/api/runs/{run_id}").json()["status"]
    return {"run": run_id, "status": status, "first_metric_s": round(first_metric or end, 3), "end_s": round(end, 3),
            "events": timeline(settings, run_id)}


def in_process(home: Home, rounds: int = 3) -> dict:
    """The same run in this process, torch imported and warmed up, on the served home's cache: the floor a job
    could reach (its first evaluation is the step-0 row; then 4 steps and the last evaluation)."""
    import tempfile as tf

    from tinygpt.records import Callbacks
    from tinygpt.run_config import TrainConfig
    from tinygpt.train import Trainer, estimate_loss, warm_up

    class Clock(Callbacks):
        def __init__(self) -> None:
            self.t0, self.first = time.perf_counter(), None

        def on_step(self, m: object) -> None:
            self.first = self.first or time.perf_counter() - self.t0

    warm_up()
    config = TrainConfig(**{k: v for k, v in FOUR_STEPS.items() if k != "name"}, corpus=str(home.corpus))
    firsts, ends, evals = [], [], []
    for _ in range(rounds):
        clock = Clock()
        trainer = Trainer(config, tf.mkdtemp(), cache_dir=home.path / "cache", callbacks=clock)
        trainer.run()
        firsts.append(clock.first)
        ends.append(time.perf_counter() - clock.t0)
        t0 = time.perf_counter()  # one more evaluation alone (the recipe's estimate): what each costs
        estimate_loss(trainer.eval_model, trainer.splits, config, trainer.model_config.context, trainer.device,
                      trainer.precision)
        evals.append(time.perf_counter() - t0)
    return {"first_metric_median_s": round(statistics.median(firsts), 3), "end_median_s": round(statistics.median(ends), 3),
            "evaluation_median_s": round(statistics.median(evals), 3)}


#: Seconds between one run's end and the next submission at a user's pace: time for the slot's next warm
#: process to finish preparing (about 3.6 s of imports and first-use costs on an idle 2-core CPU).
USER_PACE_S = 5.0


def series(c: httpx.Client, settings: Settings, runs: int, pause: float) -> dict:
    """``runs`` runs one after another, each submitted ``pause`` seconds after the previous one ended."""
    results = []
    for _ in range(runs):
        time.sleep(pause)
        results.append(one_run(c, settings))
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    firsts, ends = [r["first_metric_s"] for r in results], [r["end_s"] for r in results]
    return {"runs": results, "pause_s": pause, "first_metric_median_s": statistics.median(firsts),
            "first_metric_max_s": max(firsts), "end_median_s": statistics.median(ends), "end_max_s": max(ends)}


def run(runs: int = 4) -> dict:
    """Back to back (each run submitted as the previous one ends: its warm process is still preparing) and at a
    user's pace (:data:`USER_PACE_S` later: it is ready)."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Home(Path(tmp) / "home", holmes_path(), SERVED)
        home.path.mkdir()
        settings = Settings(home=home.path)
        proc = Serve(home, "--devices", "cpu")
        try:
            with httpx.Client(base_url=proc.url, timeout=60) as c:
                warm_up = one_run(c, settings)  # the tokenizer and encoded corpus, made once per dataset and size
                print(json.dumps({"warm_up": warm_up}), file=sys.stderr, flush=True)
                back_to_back = series(c, settings, runs, 0.0)
                paced = series(c, settings, runs, USER_PACE_S)
        finally:
            proc.stop()
        alone = in_process(home)
    return {"back_to_back": back_to_back, "user_pace": paced, "settings": SERVED, "in_process": alone}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=4)
    print(json.dumps(run(ap.parse_args().runs), indent=1))
