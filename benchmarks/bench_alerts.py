"""Alerts: what notifications and the NaN guard cost the training step, side by side in one run.

- Webhooks: the same 300-step tiny run (one CPU thread) while its worker's notifier is busy sending
  alerts to a slow receiver (each POST answered after 0.2 s, 200 deliveries queued), and while it
  is idle; alternating, 3 rounds each. The notifier is a thread of the worker process; the job is
  its own process and only writes rows.
- The guard: ``train_step`` with ``check_finite`` (one host sync per step) and with it switched off,
  alternating blocks of steps in one process (tiny preset, batch 8).

    python -m benchmarks.bench_alerts
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from .common import ROOT, holmes_path

sys.path.insert(0, str(ROOT))
from tests.service_helpers import AppServer, Home, Worker, wait_for  # noqa: E402
from tests.webhook_receiver import Receiver  # noqa: E402

RUN = {"preset": "tiny", "device": "cpu", "precision": "fp32", "steps": 300, "eval_every": 300, "eval_batches": 2,
       "batch_size": 8, "sample_tokens": 0, "threads": 1}
QUEUED = 200


def queue_deliveries(home: Home, url: str, count: int, batch: int) -> None:
    """``count`` pending deliveries of one real alert to ``url``: a notifier with plenty to do."""
    from sqlmodel import select

    from app.db import session_scope
    from app.models import Event, EventType, WebhookDelivery
    from app.settings import Settings

    settings = Settings(home=home.path)
    with session_scope(settings) as s:
        event = s.exec(select(Event).where(Event.type == EventType.alert)).first()
        for i in range(count):  # one delivery per (alert, URL): the same receiver under many URLs
            s.add(WebhookDelivery(event_id=event.id, url=f"{url}?batch={batch}&copy={i}"))


def run_rate(app: AppServer) -> float:
    """The median tokens/s of a run's logged intervals (its job's training speed)."""
    with app.client() as c:
        run_id = c.post("/api/runs", json=RUN).json()[0]["id"]
        wait_for(lambda: c.get(f"/api/runs/{run_id}").json()["status"] == "succeeded", timeout=600, interval=0.5,
                 message="the run")
        rates = [m["tokens_per_sec"] for m in c.get(f"/api/runs/{run_id}/metrics").json() if m["tokens_per_sec"] > 0]
    return statistics.median(rates)


def webhooks(rounds: int = 3) -> dict:
    receiver = Receiver(delay=0.2)
    url = f"{receiver.url}/hook"
    with tempfile.TemporaryDirectory() as tmp:
        home = Home(Path(tmp) / "home", holmes_path(), {"TINYGPT_WEBHOOK_URLS": json.dumps([url]), "TINYGPT_WEBHOOK_ALLOW": '["127.0.0.1"]'})
        home.path.mkdir()
        app, worker = AppServer(home), Worker(home, "bench")
        try:
            run_rate(app)  # warm-up: tokenizer, token cache; its alert is the one queued below
            rates: dict[str, list[float]] = {"idle": [], "busy": []}
            for round_ in range(rounds):
                rates["idle"].append(run_rate(app))
                wait_for(lambda: len(receiver.posts) >= 1, timeout=60, message="the warm-up's webhook")
                queue_deliveries(home, url, QUEUED, round_)
                sent_before = len(receiver.posts)
                rates["busy"].append(run_rate(app))
                sent_during = len(receiver.posts) - sent_before
                target = sent_before + QUEUED
                wait_for(lambda t=target: len(receiver.posts) >= t, timeout=600, interval=1,
                         message="the queued webhooks")  # idle again before the next round
        finally:
            worker.stop()
            app.stop()
            receiver.stop()
    idle, busy = statistics.median(rates["idle"]), statistics.median(rates["busy"])
    return {"idle_tokens_per_sec": round(idle), "busy_tokens_per_sec": round(busy), "ratio": round(busy / idle, 3),
            "sent_during_last_busy_run": sent_during, "rounds": rates}


def guard(blocks: int = 6, steps: int = 30) -> dict:
    """Steps per second with the NaN guard and without it, alternating blocks in one process."""
    import tinygpt.train as train_module
    from tinygpt.data import get_batch
    from tinygpt.model import GPT
    from tinygpt.optimization import make_optimizer
    from tinygpt.presets import model_config

    torch.set_num_threads(1)
    config = train_module.TrainConfig(preset="tiny", steps=1000, batch_size=8, precision="fp32")
    model_cfg = model_config("tiny", None)
    torch.manual_seed(0)
    model = GPT(model_cfg)
    optimizer = make_optimizer(model, config, torch.device("cpu"))
    tokens = torch.randint(0, model_cfg.vocab_size, (200_000,))
    generator = torch.Generator().manual_seed(0)
    checked = train_module.check_finite

    def block() -> float:
        t0 = time.perf_counter()
        for _ in range(steps):
            batch = get_batch(tokens, config.batch_size, model_cfg.context, generator, torch.device("cpu"))
            train_module.train_step(model, optimizer, [batch], device=torch.device("cpu"), precision="fp32",
                                    config=config)
        return (time.perf_counter() - t0) / steps

    times: dict[str, list[float]] = {"guard": [], "none": []}
    block()  # warm-up
    for _ in range(blocks):
        for name in ("guard", "none"):
            train_module.check_finite = checked if name == "guard" else (lambda *a, **k: None)
            times[name].append(block())
    train_module.check_finite = checked
    on, off = statistics.median(times["guard"]), statistics.median(times["none"])
    return {"step_ms_guard": round(on * 1000, 2), "step_ms_none": round(off * 1000, 2), "ratio": round(on / off, 3)}


def run() -> dict:
    return {"webhooks": webhooks(), "guard": guard()}


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
