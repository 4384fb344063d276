"""MLflow's tracking API, against MLflow's own client: unmodified scripts (mlflow-skinny 2.22.1 and 3.17.2, each in
its own environment: scripts/install-mlflow-clients.sh) report to a real ``tinygpt app`` with only
MLFLOW_TRACKING_URI and MLFLOW_TRACKING_TOKEN set; what they logged reads back exactly through the client and
through the dashboard's own API. Errors in MLflow's shape are checked in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from .browser import open_page, shot
from .service_helpers import ROOT, read_events, wait_for

TOKEN = "mlflow-test-token-0123456789abcdef0123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CLIENTS = sorted((ROOT / ".venv").glob("mlflow-*/bin/python"))
CLIENT_VERSIONS = ["2.22.1", "3.17.2"]

TRAIN_SCRIPT = """
import json, sys
import mlflow

mlflow.set_experiment("holmes-nanogpt")
with mlflow.start_run(run_name="nanogpt-style") as run:
    mlflow.log_params({"batch_size": 8, "block_size": 128, "max_iters": 30, "learning_rate": 6e-4})
    for step in range(30):
        mlflow.log_metric("train/loss", 5.0 - step / 16, step=step)
        mlflow.log_metric("mfu", 10.0 + step / 8, step=step)
        if step % 10 == 0:
            mlflow.log_metric("val/loss", 5.25 - step / 16, step=step)
    mlflow.set_tag("recipe", "series")
    with mlflow.start_run(run_name="child", nested=True) as child:
        mlflow.log_metric("loss", 1.5, step=3)
client = mlflow.MlflowClient()
history = client.get_metric_history(run.info.run_id, "train/loss")
found = mlflow.search_runs(experiment_names=["holmes-nanogpt"], output_format="list")
got = client.get_run(run.info.run_id)
print(json.dumps({"run_id": run.info.run_id, "child_id": child.info.run_id,
                  "history": [[m.step, m.value] for m in history], "found": sorted(r.info.run_id for r in found),
                  "status": got.info.status, "params": got.data.params, "tag": got.data.tags.get("recipe"),
                  "parent": client.get_run(child.info.run_id).data.tags.get("mlflow.parentRunId"),
                  "version": mlflow.__version__}))
"""

KILLED_SCRIPT = """
import os, signal
import mlflow

with mlflow.start_run(run_name="killed"):
    mlflow.log_metric("loss", 4.0, step=0)
    os.kill(os.getpid(), signal.SIGKILL)  # as a killed job: no end_run, no atexit
"""


ARTIFACT_SCRIPT = """
import json, sys
import mlflow

mlflow.set_experiment("with-artifacts")
with mlflow.start_run(run_name="artifacts") as run:
    mlflow.log_metric("loss", 4.0, step=0)
    open("notes.txt", "w").write("lr 6e-4, batch 8")
    mlflow.log_artifact("notes.txt", artifact_path="logs/first")
    mlflow.log_artifact(sys.argv[1])  # a checkpoint of this dashboard's trainer: best.pt
    open("other.pt", "wb").write(b"PK not a checkpoint")
    mlflow.log_artifact("other.pt")
client = mlflow.MlflowClient()
back = mlflow.artifacts.download_artifacts(run_id=run.info.run_id, artifact_path="logs/first/notes.txt")
print(json.dumps({"run_id": run.info.run_id, "root": [[f.path, f.is_dir] for f in client.list_artifacts(run.info.run_id)],
                  "logs": [f.path for f in client.list_artifacts(run.info.run_id, "logs/first")],
                  "back": open(back).read()}))
"""


def client_python(version: str) -> Path:
    python = ROOT / ".venv" / f"mlflow-{version}" / "bin" / "python"
    if not python.exists():  # `make test` installs both (scripts/install-mlflow-clients.sh)
        pytest.skip(f"MLflow's client {version} is not installed: run scripts/install-mlflow-clients.sh")
    return python


def run_script(python: Path, script: str, url: str, tmp_path: Path, token: str | None = TOKEN,
               args: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    path = tmp_path / "script.py"
    path.write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env |= {"MLFLOW_TRACKING_URI": url, "PYTHONPATH": ""} | ({"MLFLOW_TRACKING_TOKEN": token} if token else {})
    return subprocess.run([str(python), str(path), *args], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=180)


@pytest.fixture(scope="module")
def service(start_service):
    return start_service("mlflow", TINYGPT_API_TOKEN=TOKEN, TINYGPT_MAX_CHECKPOINT_MB="2", TINYGPT_CLIENT_SILENT_SEC="2", TINYGPT_EVENT_WINDOW_SEC="4")


@pytest.mark.parametrize("version", CLIENT_VERSIONS)
def test_an_unmodified_mlflow_script_reports_and_reads_back_what_it_logged(service, version, tmp_path, browser):
    url = service.app.url
    done = run_script(client_python(version), TRAIN_SCRIPT, url, tmp_path)
    assert done.returncode == 0, done.stderr
    read = json.loads(done.stdout.strip().splitlines()[-1])
    assert read["version"] == version
    assert read["history"] == [[s, 5.0 - s / 16] for s in range(30)]
    assert read["run_id"] in read["found"] and read["child_id"] in read["found"]
    assert (read["status"], read["tag"], read["parent"]) == ("FINISHED", "series", read["run_id"])
    assert read["params"] == {"batch_size": "8", "block_size": "128", "max_iters": "30", "learning_rate": "0.0006"}
    with httpx.Client(base_url=url, headers=AUTH, timeout=30) as c:
        runs = c.get("/api/runs", params={"limit": 100}).json()["items"]
        run = next(r for r in runs if r["name"] == "nanogpt-style" and r["origin"] == "mlflow"
                   and r["id"] == max(x["id"] for x in runs if x["name"] == "nanogpt-style"))
        assert (run["status"], run["steps"], run["last_step"], run["best_val_loss"], run["best_step"]) == (
            "succeeded", 30, 29, 5.25 - 20 / 16, 20)
        assert (run["group_name"], run["stoppable"]) == ("holmes-nanogpt", False)
        assert run["config"]["batch_size"] == "8"
        rows = c.get(f"/api/runs/{run['id']}/metrics").json()
        assert [r["train_loss"] for r in rows] == [5.0 - s / 16 for s in range(30)]
        assert [(r["step"], r["val_loss"]) for r in rows if r["val_loss"] is not None] == [
            (s, 5.25 - s / 16) for s in (0, 10, 20)]
        assert [r["tokens_seen"] for r in rows[:3]] == [0, 1024, 2048]  # batch 8 x 128 tokens from its params
        series = {s["name"]: s for s in c.get(f"/api/runs/{run['id']}/series").json()}
        assert series["mfu"]["values"] == [10.0 + s / 8 for s in range(30)] and series["mfu"]["column"] is None
        refused = c.post(f"/api/runs/{run['id']}/cancel")
        assert refused.status_code == 409
    page = open_page(browser, extra_http_headers=AUTH)  # its curves on the run page
    page.goto(f"{url}/runs/{run['id']}")
    assert page.inner_text("#origin-desc") == (
        f"mlflow another trainer's script ({run['host']}), reporting through MLflow's client")
    page.wait_for_function("window.runState.rows.length === 30 && window.runState.seriesCharts?.length === 1")
    assert page.evaluate("window.runState.charts.loss.data.slice(0, 3)") == [
        list(range(30)), [5.0 - s / 16 for s in range(30)], [5.25 - s / 16 if s in (0, 10, 20) else None for s in range(30)]]
    assert page.evaluate("window.runState.seriesCharts[0].data") == [list(range(30)), [10.0 + s / 8 for s in range(30)]]
    assert page.inner_text("#series-mapping").splitlines() == [
        "train/loss -> training loss", "val/loss -> validation loss"]
    assert page.is_hidden("#cancel-btn")
    shot(page, f"run-mlflow-{version}")
    page.context.close()
    assert page.js_errors == [], page.js_errors


@pytest.mark.parametrize("version", CLIENT_VERSIONS)
def test_artifacts_are_kept_with_the_run_and_a_checkpoint_of_ours_samples(service, version, tmp_path,
                                                                          write_checkpoint):
    checkpoint = write_checkpoint(tmp_path / "best.pt")
    done = run_script(client_python(version), ARTIFACT_SCRIPT, service.app.url, tmp_path, args=(str(checkpoint),))
    assert done.returncode == 0, done.stderr
    read = json.loads(done.stdout.strip().splitlines()[-1])
    assert read["root"] == [["best.pt", False], ["logs", True], ["other.pt", False]]
    assert (read["logs"], read["back"]) == (["logs/first/notes.txt"], "lr 6e-4, batch 8")
    with httpx.Client(base_url=service.app.url, headers=AUTH, timeout=30) as c:
        runs = c.get("/api/runs", params={"limit": 100}).json()["items"]
        run = max((r for r in runs if r["name"] == "artifacts"), key=lambda r: r["id"])
        assert run["has_checkpoint"] is True
        sample = c.post(f"/api/runs/{run['id']}/sample", json={"prompt": "Holmes", "max_tokens": 4, "seed": 1})
        assert sample.status_code == 200 and "event: end" in sample.text
        logs = log_messages(service.app.url, run["id"])  # the first: the client and experiment
        assert logs[1:] == ["artifact best.pt is a checkpoint of ours: the run can be sampled",
                            "artifact other.pt is kept as a file: not a checkpoint of this dashboard's "
                            "(other.pt is not a readable checkpoint (not a PyTorch file of tensors and plain data))"]
        prefix = f"/api/2.0/mlflow-artifacts/artifacts/{run['group_id']}/{read['run_id']}/artifacts"
        escape = c.put(f"{prefix}/../../../../etc/passwd", content=b"x")  # the client's URL is normalised first
        assert (escape.status_code, escape.json()["error_code"]) == (404, "ENDPOINT_NOT_FOUND")
        where = f"{run['group_id']}/{read['run_id']}/artifacts"
        for bad, message in (("logs/%2e%2e/%2e%2e/x", f"Invalid artifact path '{where}/logs/../../x': '..' is not "
                                                      "allowed in a path"),
                             ("a\\..\\b", f"Invalid artifact path '{where}/a\\..\\b': 'a\\..\\b' is not "
                                              "allowed in a path")):
            refused = c.put(f"{prefix}/{bad}", content=b"x")
            assert (refused.status_code, refused.json()) == (
                400, {"error_code": "INVALID_PARAMETER_VALUE", "message": message})
        big = c.put(f"{prefix}/big.bin", content=b"x" * 2_000_001)
        assert big.status_code == 413
        assert c.get(f"{prefix}/big.bin").status_code == 404


def log_messages(url: str, run_id: int) -> list[str]:
    """The log messages of an ended run's event stream (which ends with ``end``), read as a page reads it: the
    metrics history first, then the stream after it (metric events older than the outbox's window are gone)."""
    history = httpx.get(f"{url}/api/runs/{run_id}/metrics", params={"format": "columns"}, headers=AUTH, timeout=30)
    events = read_events(f"{url}/api/runs/{run_id}/events?history={history.json()['last_event_id']}", timeout=30,
                         headers=AUTH)
    assert events[-1]["event"] == "end"
    return [e["data"]["message"] for e in events if e["event"] == "log"]


def test_a_killed_script_ends_crashed_and_comes_back_if_it_logs_again(service, tmp_path):
    url = service.app.url
    done = run_script(client_python(CLIENT_VERSIONS[-1]), KILLED_SCRIPT, url, tmp_path)
    assert done.returncode == -9
    with httpx.Client(base_url=url, headers=AUTH, timeout=30) as c:
        run = next(r for r in c.get("/api/runs", params={"limit": 100}).json()["items"] if r["name"] == "killed")
        assert run["status"] == "running" and run["stoppable"] is False
        wait_for(lambda: c.get(f"/api/runs/{run['id']}").json()["status"] == "crashed", timeout=30,
                 message="the silent run to end crashed")
        ended = c.get(f"/api/runs/{run['id']}").json()
        assert ended["error"] == ("its MLflow client sent nothing for 2 s (the script stopped without ending the "
                                  "run); a value it logs later resumes it")
        mlflow_id = c.post("/api/2.0/mlflow/runs/search", json={"experiment_ids": ["0"]}).json()["runs"][0]["info"]
        assert mlflow_id["status"] == "FAILED" and mlflow_id["run_name"] == "killed"
        logged = c.post("/api/2.0/mlflow/runs/log-metric", json={"run_id": mlflow_id["run_id"], "key": "loss",
                                                                "value": 3.5, "timestamp": int(time.time() * 1000),
                                                                "step": 1})
        assert logged.status_code == 200, logged.text
        assert c.get(f"/api/runs/{run['id']}").json()["status"] == "running"


def test_nothing_is_written_without_the_token(service, tmp_path):
    done = run_script(client_python(CLIENT_VERSIONS[-1]), TRAIN_SCRIPT, service.app.url, tmp_path, token=None)
    assert done.returncode != 0 and "this dashboard needs its API token" in done.stderr


# -- in-process: MLflow's error shapes ---------------------------------------------------------------------
def test_errors_are_mlflows(make_app):
    c = make_app()
    missing = c.get("/api/2.0/mlflow/experiments/get-by-name", params={"experiment_name": "nope"})
    assert (missing.status_code, missing.json()) == (404, {"error_code": "RESOURCE_DOES_NOT_EXIST",
                                                          "message": "Could not find experiment with name 'nope'"})
    assert c.post("/api/2.0/mlflow/experiments/create", json={"name": "a"}).json() == {"experiment_id": "1"}
    again = c.post("/api/2.0/mlflow/experiments/create", json={"name": "a"})
    assert (again.status_code, again.json()["error_code"]) == (400, "RESOURCE_ALREADY_EXISTS")
    probe = c.post("/api/2.0/mlflow/traces", json={})
    assert (probe.status_code, probe.json()) == (404, {
        "error_code": "ENDPOINT_NOT_FOUND",
        "message": "POST /api/2.0/mlflow/traces is not served by this dashboard's MLflow tracking API"})
    assert c.post("/api/2.0/mlflow/logged-models/search", json={}).json() == {"models": []}  # none are logged here
    created = c.post("/api/2.0/mlflow/runs/create", json={"experiment_id": "1", "start_time": "1700000000000"})
    run_id = created.json()["run"]["info"]["run_id"]
    bad = c.post("/api/2.0/mlflow/runs/log-batch", json={"run_id": run_id, "metrics": [{"key": "x", "value": 1}]})
    assert (bad.status_code, bad.json()) == (400, {"error_code": "INVALID_PARAMETER_VALUE",
                                                   "message": "Invalid value for 'metrics.0.timestamp': Field required"})
    unknown = c.post("/api/2.0/mlflow/runs/log-batch", json={"run_id": run_id, "surprise": 1})
    assert unknown.json()["message"] == "Invalid value for 'surprise': unknown field 'surprise'"
    c.post("/api/2.0/mlflow/runs/log-parameter", json={"run_id": run_id, "key": "lr", "value": "0.1"})
    changed = c.post("/api/2.0/mlflow/runs/log-parameter", json={"run_id": run_id, "key": "lr", "value": "0.2"})
    assert changed.status_code == 400 and changed.json()["message"].startswith("Changing param values is not allowed")
    nan = c.post("/api/2.0/mlflow/runs/log-metric", json={"run_id": run_id, "key": "loss", "value": "NaN",
                                                          "timestamp": 1700000001000, "step": 2})
    assert nan.status_code == 200  # MLflow takes it: kept in its series, never a run column
    history = c.get("/api/2.0/mlflow/metrics/get-history", params={"run_id": run_id, "metric_key": "loss"}).json()
    assert [(m["step"], m["value"], m["timestamp"]) for m in history["metrics"]] == [(2, "NaN", 1700000001000)]
    assert c.get("/api/runs/1/series").json()[0]["values"] == [None]
    assert c.get("/api/runs/1/metrics").json() == []  # the dashboard's run 1: no row from a NaN
    filtered = c.post("/api/2.0/mlflow/runs/search", json={"filter": "metrics.loss < 1"})
    assert filtered.json()["error_code"] == "INVALID_PARAMETER_VALUE"  # refused, not ignored
    gone = c.get("/api/2.0/mlflow/runs/get", params={"run_id": "0" * 32})
    assert (gone.status_code, gone.json()["error_code"]) == (404, "RESOURCE_DOES_NOT_EXIST")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))
