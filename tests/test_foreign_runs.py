"""Runs of other trainers brought in from their files (POST /api/runs/import-foreign, as ``tinygpt import`` reads
them): every value kept by its own name, the names that mean a run column filling its metrics rows, so best val,
time to target, compare and the run page work on them; bad input refused naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tinygpt.run_import import foreign_payload, is_foreign

from .test_foreign_logs import LLMC_LOG, MODDED_LOG, NANOGPT_LOG

TOKEN = "foreign-runs-test-token-0123456789abcdef"


@pytest.fixture
def logs(tmp_path: Path) -> dict[str, Path]:
    paths = {}
    for name, text in (("nanogpt", NANOGPT_LOG), ("llmc", LLMC_LOG), ("modded", MODDED_LOG)):
        paths[name] = tmp_path / f"{name}.log"
        paths[name].write_text(text)
    return paths


def imported(client, payload: dict) -> dict:  # noqa: ANN001
    response = client.post("/api/runs/import-foreign", json=payload)
    assert response.status_code == 201, response.text
    return response.json()


def test_a_nanogpt_log_becomes_a_run_with_its_columns_and_every_value(make_app, logs):
    client = make_app()
    payload = foreign_payload(logs["nanogpt"], config_arg='{"max_iters": 5000, "batch_size": 64}',
                              device="cuda", device_name="NVIDIA H100", tokens_per_step=16384, target=2.1)
    run = imported(client, payload)
    assert (run["origin"], run["status"], run["steps"], run["last_step"], run["device"]) == (
        "log_file", "succeeded", 5000, 250, "cuda")
    assert (run["best_val_loss"], run["best_step"], run["config"]) == (
        2.0645, 250, {"max_iters": 5000, "batch_size": 64, "steps": 5000})
    # the target reached at step 250: 4.096M tokens, no time (the log says none)
    assert run["time_to_target"] == {"step": 250, "tokens": 4_096_000, "seconds": None, "exact": False,
                                     "line": "reached 2.1 at step 250, 4.1M tokens (by the estimate, not the whole split)"}
    rows = client.get(f"/api/runs/{run['id']}/metrics").json()
    assert [(r["step"], r["train_loss"], r["val_loss"], r["tokens_seen"], r["lr"]) for r in rows] == [
        (0, 4.2654, 4.2823, 0, None), (10, 3.2410, None, 163840, None), (250, 2.0411, 2.0645, 4_096_000, None)]
    series = {s["name"]: s for s in client.get(f"/api/runs/{run['id']}/series").json()}
    assert sorted(series) == ["iter_time_ms", "loss", "mfu", "train loss", "val loss"]
    assert (series["mfu"]["column"], series["mfu"]["steps"], series["mfu"]["values"]) == (None, [10, 250], [9.30, 9.18])
    assert series["val loss"]["column"] == "val_loss"
    exported = client.get(f"/api/runs/{run['id']}/series", params={"format": "csv"})
    assert exported.headers["content-type"].startswith("text/csv")
    lines = exported.text.splitlines()
    assert lines[0] == "name,step,value,wall_time" and len(lines) == 13  # every value logged
    assert lines[1:4] == ["iter_time_ms,0,29877.81,", "iter_time_ms,10,40.12,", "iter_time_ms,250,5321.07,"]
    stream = client.get(f"/api/runs/{run['id']}/events").text  # a finished run's stream ends
    logs = [json.loads(block.split("data: ", 1)[1]) for block in stream.split("\r\n\r\n")
            if "\r\nevent: log\r\n" in block]
    assert logs == [{"run_id": run["id"], "message": "imported from a nanoGPT log: 12 values of 5 names, 3 metrics rows; mapped: "
                                "loss -> train_loss, train loss -> train_loss, val loss -> val_loss"}]


def test_llmc_and_modded_nanogpt_logs_compare_with_each_other(make_app, logs):
    client = make_app()
    llmc = imported(client, foreign_payload(logs["llmc"], name="llm.c gpt2"))
    modded = imported(client, foreign_payload(logs["modded"]))
    assert (modded["steps"], modded["last_step"], modded["best_val_loss"]) == (1390, 125, 4.2312)
    assert (llmc["steps"], llmc["best_val_loss"], llmc["name"]) == (250, 4.1217, "llm.c gpt2")
    rows = client.get(f"/api/runs/{modded['id']}/metrics").json()
    assert [(r["step"], r["train_loss"], r["elapsed_sec"]) for r in rows] == [
        (0, None, 0.0), (1, None, 0.093), (2, None, 0.18), (125, None, 12.345)]
    compared = client.get("/api/compare", params={"ids": f"{llmc['id']},{modded['id']}"})
    assert compared.status_code == 200, compared.text
    body = compared.json()
    assert [r["best_val_loss"] for r in body["runs"]] == [4.1217, 4.2312]
    # shared evaluation steps 0 and 125? llm.c evaluates at 0 and 250: step 0 only; no train loss from modded
    assert body["max_val_loss_gap"] == pytest.approx(10.9864 - 10.8258)
    assert body["max_train_loss_gap"] is None
    page = client.get(f"/compare?ids={llmc['id']},{modded['id']}")
    assert page.status_code == 200


def test_tensorboard_files_import_with_their_wall_times(make_app, tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    logdir = tmp_path / "runs" / "exp1"
    writer = SummaryWriter(str(logdir))
    for step in range(5):
        writer.add_scalar("train/loss", 4.0 - step / 4, step, walltime=1_700_000_000 + 2 * step)
        writer.add_scalar("tok_per_sec", 1000.0 + step, step, walltime=1_700_000_000 + 2 * step)
    writer.add_scalar("val/loss", 3.5, 4, walltime=1_700_000_008)
    writer.close()
    assert is_foreign(logdir)
    client = make_app()
    run = imported(client, foreign_payload(logdir))
    assert (run["origin"], run["name"], run["best_val_loss"]) == ("tensorboard", "exp1", 3.5)
    rows = client.get(f"/api/runs/{run['id']}/metrics").json()
    assert [(r["step"], r["train_loss"], r["tokens_per_sec"], r["elapsed_sec"]) for r in rows] == [
        (s, 4.0 - s / 4, 1000.0 + s, 2.0 * s) for s in range(5)]
    assert rows[4]["val_loss"] == 3.5
    page = client.get(f"/runs/{run['id']}")
    assert page.status_code == 200
    assert "<code>train/loss</code> -&gt; training loss" in page.text and "<code>tok_per_sec</code> -&gt; tokens/s" in page.text


def test_bad_foreign_imports_name_the_field(make_app, logs):
    client = make_app(api_token=TOKEN)
    payload = foreign_payload(logs["llmc"])
    assert client.post("/api/runs/import-foreign", json=payload).status_code == 401  # a write needs the token
    auth = {"Authorization": f"Bearer {TOKEN}"}
    cases = [({"points": []}, ("body", "points")),
             ({"origin": "dashboard"}, ("body", "origin")),
             ({"extra": 1}, ("body", "extra")),
             ({"points": [{"name": "x", "step": -1, "value": 1.0}]}, ("body", "points", 0, "step")),
             ({"points": [{"name": "x" * 251, "step": 1, "value": 1.0}]}, ("body", "points", 0, "name")),
             ({"points": [{"name": "x", "step": 1, "value": "NaN"}]}, ("body", "points", 0, "value")),
             ({"params": {"lr": "x" * 6001}}, ("body", "params", "lr", "constrained-str"))]
    for change, loc in cases:
        response = client.post("/api/runs/import-foreign", json={**payload, **change}, headers=auth)
        assert response.status_code == 422, (change, response.text)
        assert loc in {tuple(e["loc"]) for e in response.json()["detail"]}, response.json()
    assert client.get("/api/runs", headers=auth).json()["total"] == 0  # nothing half-made
