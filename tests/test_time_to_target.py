"""Time to target in the library: the whole validation split's loss (every token once), bytes per token (for bits
per byte), when a run first reaches its ``target_val_loss``, and the one rule that reads it back from the rows."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn import functional as F

from tinygpt.corpus import known_target
from tinygpt.model import GPT
from tinygpt.presets import model_config
from tinygpt.records import StepMetrics, TargetReached, read_metrics_csv
from tinygpt.train import TARGET_MARGIN, Trainer, bytes_per_token, full_val_loss, train

from .test_train import Recorder


def test_the_whole_split_loss_predicts_every_token_once():
    torch.manual_seed(0)
    model = GPT(model_config("tiny", "series", vocab_size=64, context=8)).eval()
    val = torch.randint(0, 64, (8 * 13 + 5,))  # 13 windows and 4 tokens left over
    got = full_val_loss(model, val, 8, 5, torch.device("cpu"), "fp32")  # batches of 5, 5, 3 windows
    x = val[: 8 * 13].view(13, 8)
    y = val[1: 8 * 13 + 1].view(13, 8)
    logits, _ = model(x)
    expected = F.cross_entropy(logits.reshape(-1, 64), y.reshape(-1)).item()
    assert got == pytest.approx(expected, rel=1e-5)
    assert model.training is False


def test_bytes_per_token_is_the_texts_bytes_over_its_tokens(slice_tokens, small_tokenizer):
    tokens = slice_tokens[:5000]
    expected = len(small_tokenizer.decode_bytes(tokens.tolist())) / 5000
    assert bytes_per_token(tokens, small_tokenizer) == pytest.approx(expected)
    assert expected > 1.5  # a 512-token BPE: more than a byte a token


def test_holmes_is_a_known_corpus_with_the_series_target(holmes_text, slice_path):
    assert known_target(holmes_text) == 3.76
    assert known_target(slice_path.read_text()) is None


def row(step: int, val: float | None, full: float | None = None) -> StepMetrics:
    return StepMetrics(step, 4.0, val, 1e-3, 1000.0, step * 2.0, step * 1000, 0.1, 10.0, full)


def test_the_first_whole_split_loss_at_or_under_the_target_decides():
    rows = [row(0, 8.0), row(10, 3.80, 3.79), row(15, None), row(20, 3.74, 3.77), row(30, 3.70, 3.75),
            row(40, 3.6, 3.6)]
    reached = TargetReached.first(rows, 3.76)
    assert reached == TargetReached(target=3.76, step=30, tokens_seen=30_000, elapsed_sec=60.0, val_loss=3.75)
    assert reached.line() == "reached 3.76 at step 30, 0.0M tokens, 1 min 0 s"
    assert TargetReached.first(rows, 3.5) is None
    assert TargetReached.first(rows, None) is None and TargetReached.first(rows, 0.0) is None


def test_rows_without_whole_split_losses_use_the_estimate_and_say_so():
    reached = TargetReached.first([row(0, 8.0), row(10, 3.9), row(20, 3.74)], 3.76)
    assert (reached.step, reached.exact) == (20, False)
    assert reached.line().endswith("(by the estimate, not the whole split)")


def test_a_run_measures_the_whole_split_near_its_target_and_records_when_it_reached_it(
        tmp_path, tiny_config, cache_dir):
    """The target sits between the last two evaluations' estimates of a first run (no target); the same run with
    that target measures the whole split exactly at the evaluations near it until it reaches it."""
    probe = Recorder()
    train(tiny_config(steps=40, eval_every=10, sample_tokens=0, target_val_loss=0), tmp_path / "probe",
          callbacks=probe, cache_dir=cache_dir)
    estimates = {m.step: m.val_loss for m in probe.evals}  # falling: 6.25 at step 0, 5.45 at step 40
    target = (estimates[30] + estimates[40]) / 2
    rec = Recorder()
    train(tiny_config(steps=40, eval_every=10, sample_tokens=0, target_val_loss=target), tmp_path / "run",
          callbacks=rec, cache_dir=cache_dir)
    assert rec.started["target_val_loss"] == target and rec.started["val_bytes_per_token"] > 1.5
    assert {m.step: m.val_loss for m in rec.evals} == estimates  # measuring changes nothing else
    reached = TargetReached.first(read_metrics_csv(tmp_path / "run" / "metrics.csv"), target)
    assert reached is not None and reached.exact and reached.step in (30, 40)
    measured = {m.step: m.val_loss_full for m in rec.evals if m.val_loss_full is not None}
    assert set(measured) == {s for s in estimates if s <= reached.step and estimates[s] <= target + TARGET_MARGIN}
    assert 30 in measured and all(loss > target for step, loss in measured.items() if step < reached.step)
    assert reached.val_loss == measured[reached.step] <= target
    assert abs(reached.val_loss - estimates[reached.step]) < 0.05  # the estimate is close to the whole split
    assert reached.tokens_seen == reached.step * 8 * 128


def test_no_target_no_whole_split_pass_and_resume_keeps_the_reached_step(tmp_path, tiny_config, cache_dir):
    rec = Recorder()
    train(tiny_config(steps=20, eval_every=10, sample_tokens=0, target_val_loss=0), tmp_path / "none",
          callbacks=rec, cache_dir=cache_dir)
    assert rec.started["target_val_loss"] is None and all(m.val_loss_full is None for m in rec.evals)

    first = Recorder(stop_after=10)
    train(tiny_config(steps=20, eval_every=10, sample_tokens=0, target_val_loss=50.0), tmp_path / "r",
          callbacks=first, cache_dir=cache_dir)
    assert first.evals[0].val_loss_full is not None  # step 0 is already under a target of 50
    trainer = Trainer(tiny_config(steps=20, eval_every=10, sample_tokens=0, target_val_loss=50.0), tmp_path / "r",
                      cache_dir=cache_dir, resume=True)
    assert trainer.state.target_step == 0
    assert math.isfinite(trainer.val_bytes_per_token)


# -- the dashboard: a run's time to target and bits per byte, from what its trainer reports ----------------------
def eval_row(step: int, val: float, full: float | None = None) -> dict:
    return {"step": step, "train_loss": val - 0.2, "val_loss": val, "lr": 1e-3, "tokens_per_sec": 1000.0,
            "elapsed_sec": step * 1.5, "tokens_seen": step * 8192, "epochs": 0.1, "peak_mem_mib": 100.0,
            "val_loss_full": full}


def report(client, run_id: int, *items: tuple[str, dict]) -> None:  # noqa: ANN001
    """Journal items as a trainer sends them, numbered on from the last call's."""
    body = {"items": [{"seq": report.seq + i, "kind": kind, "data": data} for i, (kind, data) in enumerate(items)]}
    report.seq += len(items)
    assert client.post(f"/api/runs/{run_id}/report", json=body).json()["applied_seq"] == report.seq - 1


def event_data(client, run_id: int, kind: str) -> list[dict]:  # noqa: ANN001
    """The data of the run's events of that kind, in order (from the app's database)."""
    from sqlmodel import select

    from app.db import session_scope
    from app.models import Event

    with session_scope(client.app.state.settings) as s:
        return [e.data for e in s.exec(select(Event).where(Event.run_id == run_id, Event.type == kind)
                                        .order_by(Event.id))]


def log_lines(client, run_id: int) -> list[str]:  # noqa: ANN001
    return [data["message"] for data in event_data(client, run_id, "log")]


report.seq = 1
START = {"device": "cpu", "device_info": {"name": "a CPU"}, "precision": "fp32", "params": 1000,
         "target_val_loss": 4.0, "val_bytes_per_token": 3.0}


def test_the_api_shows_when_a_reported_run_reached_its_target_and_forgets_it_on_an_earlier_resume(make_app):
    client = make_app()
    run = client.post("/api/runs/reported", json={"report_id": "ab12cd34", "name": "to target",
                                                  "config": {"preset": "tiny", "steps": 50}}).json()
    assert (run["target_val_loss"], run["time_to_target"], run["best_val_bpb"]) == (None, None, None)
    report.seq = 1
    report(client, run["id"], ("start", START), ("metric", eval_row(10, 4.5)), ("metric", eval_row(20, 4.03, 4.05)),
           ("metric", eval_row(30, 3.98, 3.99)), ("metric", eval_row(40, 3.9)))
    shown = client.get(f"/api/runs/{run['id']}").json()
    assert shown["target_val_loss"] == 4.0 and shown["val_bytes_per_token"] == 3.0
    assert shown["time_to_target"] == {"step": 30, "tokens": 30 * 8192, "seconds": 45.0, "exact": True,
                                       "line": "reached 4 at step 30, 0.2M tokens, 45 s"}
    assert "reached 4 at step 30, 0.2M tokens, 45 s" in log_lines(client, run["id"])
    assert event_data(client, run["id"], "target") == [{"target": 4.0, **shown["time_to_target"]}]
    # a resume from step 20 (its last checkpoint) trains steps 21-30 again: the target is reached anew
    report(client, run["id"], ("start", {**START, "start_step": 20, "resumed": True}))
    assert client.get(f"/api/runs/{run['id']}").json()["time_to_target"] is None
    report(client, run["id"], ("metric", eval_row(30, 3.97, 3.98)))
    assert client.get(f"/api/runs/{run['id']}").json()["time_to_target"]["step"] == 30


def test_bits_per_byte_is_the_best_loss_over_ln2_and_the_bytes_per_token():
    from app.models.runs import Run, RunPublic

    run = Run(id=1, name="r", config={"steps": 10}, best_val_loss=3.76, val_bytes_per_token=3.2)
    assert RunPublic.of(run).best_val_bpb == pytest.approx(3.76 / math.log(2) / 3.2)
    assert RunPublic.of(Run(id=2, name="r", config={}, best_val_loss=3.76)).best_val_bpb is None


def test_an_imported_holmes_run_reaches_the_series_target_by_its_estimates(make_app, holmes_path):
    """The series' recorded CPU run (docs/runs): its rows have no whole-split losses, so its estimate decides;
    holmes is a known corpus, so its target is 3.76 unless the run says otherwise."""
    from dataclasses import asdict
    from pathlib import Path

    rows = [asdict(r) for r in read_metrics_csv(Path(__file__).parents[1] / "docs/runs/cpu-holmes-1500-fp32.csv")]
    client = make_app(holmes_path=holmes_path)
    body = {"name": "series", "device": "cpu", "config": {"preset": "holmes", "dataset": "holmes"}, "metrics": rows}
    run = client.post("/api/runs/import", json=body).json()
    assert run["target_val_loss"] == 3.76
    assert run["time_to_target"] == {"step": 1250, "tokens": 10_240_000, "seconds": pytest.approx(22397.66),
                                     "exact": False,
                                     "line": "reached 3.76 at step 1,250, 10.2M tokens, 6 h 13 min (by the estimate, not the whole "
                                             "split)"}
    other = client.post("/api/runs/import", json={**body, "config": {**body["config"], "target_val_loss": 3.8}})
    assert other.json()["time_to_target"]["step"] == 1000
    none = client.post("/api/runs/import", json={**body, "config": {**body["config"], "target_val_loss": 0}})
    assert (none.json()["target_val_loss"], none.json()["time_to_target"]) == (None, None)


def imported(client, name: str, fulls: list[float | None], target: float | None = 4.0) -> int:  # noqa: ANN001
    """An imported run whose evaluations at steps 10, 20, ... measured these whole-split losses."""
    rows = [eval_row(10 * (i + 1), (full or 4.5) + 0.01, full) for i, full in enumerate(fulls)]
    config = {"preset": "tiny", "steps": 10 * len(fulls), **({"target_val_loss": target} if target is not None else {})}
    return client.post("/api/runs/import", json={"name": name, "device": "cpu", "config": config,
                                                 "metrics": rows}).json()["id"]


def test_the_run_list_sorts_by_time_to_target_then_the_runs_that_never_reached_it(make_app):
    client = make_app()
    slow = imported(client, "slow", [4.2, 4.1, 3.9])  # reached at step 30: 45 s
    never = imported(client, "never", [4.3, 4.2])
    fast = imported(client, "fast", [4.1, 3.95])  # step 20: 30 s
    untargeted = imported(client, "no target", [4.2], target=0)
    by_target = client.get("/api/runs", params={"sort": "time_to_target"}).json()["items"]
    assert [r["id"] for r in by_target] == [fast, slow, untargeted, never]  # then the newest first
    assert [r["time_to_target"] and r["time_to_target"]["seconds"] for r in by_target] == [30.0, 45.0, None, None]
    by_loss = client.get("/api/runs", params={"sort": "best_val_loss"}).json()["items"]
    assert [r["id"] for r in by_loss] == [slow, fast, untargeted, never]  # best estimates 3.91, 3.96, 4.21, 4.31
    refused = client.get("/api/runs", params={"sort": "fastest"})
    assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["query", "sort"]
    table = client.get("/partials/runs", params={"sort": "time_to_target"}).text
    assert table.index("#" + str(fast)) < table.index("#" + str(slow)) < table.index("#" + str(never))
    assert '<span title="4.0 reached at step 20, 163,840 tokens">30 s</span>' in table
    assert 'title="target 4.0">not reached</span>' in table
    assert 'aria-sort="ascending" title="training time until' in table


def test_time_to_target_as_a_sweep_objective(make_app):
    from app.models import Run
    from app.services.sweeps import NEVER_REACHED_SEC, objective

    assert objective(None, Run(name="r", config={}, target_sec=12.5, best_val_loss=3.7), "time_to_target") == 12.5
    unreached = objective(None, Run(name="r", config={}, best_val_loss=3.9), "time_to_target")
    assert unreached == NEVER_REACHED_SEC + 3.9 > objective(None, Run(name="r", config={}, target_sec=9e8),
                                                            "time_to_target")
    assert objective(None, Run(name="r", config={}), "time_to_target") is None

    client = make_app()  # its holmes is a slice of the corpus: no known target
    body = {"method": "grid", "metric": {"name": "time_to_target"}, "parameters": {"lr": {"values": [1e-3]}},
            "base": {"preset": "tiny", "device": "cpu", "steps": 2}}
    refused = client.post("/api/sweeps", json=body)
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["msg"] == ("metric time_to_target needs a target: set target_val_loss in "
                                                  "base (dataset 'holmes' has no known one)")
    body["base"]["target_val_loss"] = 5.0
    assert client.post("/api/sweeps", json=body).status_code == 201


def test_tinygpt_train_says_when_the_target_is_reached_once(capsys):
    from tinygpt.progress import ProgressCallbacks

    progress = ProgressCallbacks(total_steps=40, bar=False)
    progress.on_start({"device": "cpu", "device_info": {"name": "a CPU"}, "precision": "fp32", "params": 1000,
                       "train_tokens": 900, "val_tokens": 100, "start_step": 0, "resumed": False,
                       "target_val_loss": 4.0})
    for step, val, full in ((10, 4.5, None), (20, 4.03, 4.05), (30, 3.98, 3.99), (40, 3.9, None)):
        progress.on_eval(row(step, val, full))
    lines = capsys.readouterr().out.splitlines()
    assert lines[2:] == ["step     20: train 4.0000  val 4.0300 (whole split 4.0500)  1,000 tok/s  10 MiB",
                         "step     30: train 4.0000  val 3.9800 (whole split 3.9900)  1,000 tok/s  10 MiB",
                         "reached 4 at step 30, 0.0M tokens, 1 min 0 s",
                         "step     40: train 4.0000  val 3.9000  1,000 tok/s  10 MiB"]


def test_an_uploaded_dataset_carries_its_runs_default_target(make_app):
    client = make_app()
    text = ("It was a bright cold day in April, and the clocks were striking thirteen. " * 400).encode()
    refused = client.post("/api/datasets", data={"name": "orwell", "target_val_loss": "0"},
                          files={"file": ("o.txt", text)})
    assert refused.status_code == 422 and refused.json()["detail"][0]["loc"][-1] == "target_val_loss"
    uploaded = client.post("/api/datasets", data={"name": "orwell", "target_val_loss": "2.5"},
                           files={"file": ("o.txt", text)})
    assert uploaded.status_code == 201 and uploaded.json()["target_val_loss"] == 2.5
    listed = {d["name"]: d["target_val_loss"] for d in client.get("/api/datasets").json()}
    assert listed == {"holmes": None, "orwell": 2.5}  # this app's holmes is a slice: no known target
    base = {"preset": "tiny", "device": "cpu", "steps": 2, "context": 16, "vocab_size": 256}
    run = client.post("/api/runs", json={**base, "dataset": "orwell"}).json()[0]
    assert run["config"]["target_val_loss"] == 2.5  # its dataset's, shown with its options
    mine = client.post("/api/runs", json={**base, "dataset": "orwell", "target_val_loss": 3.0}).json()[0]
    assert mine["config"]["target_val_loss"] == 3.0
    none = client.post("/api/runs", json={**base, "dataset": "orwell", "target_val_loss": 0}).json()[0]
    assert none["config"]["target_val_loss"] == 0
    assert client.post("/api/runs", json=base).json()[0]["config"]["target_val_loss"] is None
