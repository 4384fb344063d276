"""One declaration, one run: the new-run form (its own POST, as the browser sends it) with a non-default
value in every group, and `tinygpt train` with the same flags, write the same config.json and the
same losses for the same seed on the CPU."""

from __future__ import annotations

import csv
import json

import httpx

from .service_helpers import AppServer, Worker, finished, make_home, read_events, start_tinygpt

CHOSEN = {  # a value other than the default in every group of the declaration
    "preset": "tiny", "arch": "classic", "dropout": "0.05",  # model
    "precision": "fp32", "seed": "7", "threads": "1",  # data and device
    "batch_size": "4", "lr": "0.002", "weight_decay": "0.05", "label_smoothing": "0.1",  # optimisation
    "steps": "6", "warmup": "2", "min_lr_ratio": "0.2",  # schedule
    "eval_every": "3", "eval_batches": "2", "log_every": "1", "sample_every": "3", "sample_tokens": "5",
    "sample_temperature": "0.5", "sample_prompt": "Watson",  # evaluation and samples
}


def losses(path) -> list[tuple[str, str, str]]:  # noqa: ANN001
    with open(path) as f:
        return [(r["step"], r["train_loss"], r["val_loss"]) for r in csv.DictReader(f)]


def test_form_and_command_line_make_the_same_run(tmp_path, slice_path, warm_cache):
    home = make_home(tmp_path, slice_path, warm_cache)
    flags = [arg for name, value in CHOSEN.items() for arg in (f"--{name.replace('_', '-')}", value)]
    out = tmp_path / "cli-run"
    # the command in a process of its own, as a user runs it (and beside the dashboard's run): a process that
    # trained before may round a step differently (seen after an in-process bf16 run, tests/test_recipes.py)
    command = start_tinygpt("train", *flags, "--device", "cpu", "--corpus", slice_path, "--out", out,
                            "--no-progress", env=home.env(), module="tinygpt")
    app, worker = AppServer(home), Worker(home, "same")
    try:
        # the boxes the form has ticked already come as a browser sends them (head_scores: on by default)
        response = httpx.post(f"{app.url}/new", data={**CHOSEN, "device": "cpu", "dataset": "holmes", "gpus": "1",
                                                       "resume": "1", "head_scores": "1"}, timeout=60)
        assert response.status_code == 200 and response.headers["hx-redirect"] == "/runs/1", response.text
        read_events(f"{app.url}/api/runs/1/events", timeout=300)
        assert httpx.get(f"{app.url}/api/runs/1", timeout=30).json()["status"] == "succeeded"
    finally:
        worker.stop()
        app.stop()
    finished(command, check=True)
    dashboard = json.loads((home.path / "runs" / "1" / "config.json").read_text())
    command_line = json.loads((out / "config.json").read_text())
    assert dashboard["train"] == command_line["train"]
    assert dashboard["model"] == command_line["model"] and dashboard["model"]["pos"] == "learned"  # classic
    assert dashboard["train"]["label_smoothing"] == 0.1 and dashboard["train"]["sample_prompt"] == "Watson"
    assert losses(home.path / "runs" / "1" / "metrics.csv") == losses(out / "metrics.csv")
    assert len(losses(out / "metrics.csv")) == 7  # log_every 1: steps 0 to 6
