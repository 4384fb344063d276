"""Runs from anywhere, with real processes: `tinygpt train --report-to` against a real app (row for row,
across an app restart, offline then `tinygpt sync`, cancelled from the API), its one-line errors, the
checkpoint upload's refusals, `tinygpt import` of the recorded H200 and CPU runs and `GET /api/export`."""

from __future__ import annotations

import csv
import io
import json
import os
import pickle
import re
import signal
import socket
import subprocess
import time
from dataclasses import asdict
from pathlib import Path

import httpx
import pytest
import torch

from tinygpt.checkpoint import save_checkpoint
from tinygpt.model import GPT
from tinygpt.presets import model_config
from tinygpt.records import HEAD_SCORES_FILE, read_head_scores, read_metrics_csv

from .service_helpers import (
    ROOT,
    AppServer,
    free_port,
    make_home,
    read_events,
    start_tinygpt,
    tinygpt_here,
    wait_for,
)

TOKEN = "report-test-token-9c2e"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
H200_OPTIONS = {"preset": "holmes", "device": "cuda", "precision": "bf16", "steps": 1500, "batch_size": 32,
                "eval_every": 250, "seed": 1337}
CPU_OPTIONS = {**H200_OPTIONS, "device": "cpu", "precision": "fp32", "threads": 2}
RUNS = ROOT / "docs" / "runs"
# small and quick on 2 cores: ~10 steps a second
TRAIN = ["--preset", "tiny", "--batch-size", "2", "--eval-batches", "2", "--sample-tokens", "8", "--threads", "1",
         "--precision", "fp32", "--no-progress"]


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory, slice_path, warm_cache, database_slow_pg):
    home = make_home(tmp_path_factory.mktemp("report"), slice_path, warm_cache, TINYGPT_API_TOKEN=TOKEN,
                     TINYGPT_MAX_CHECKPOINT_MB="5", **database_slow_pg)
    app = AppServer(home)
    yield home, app
    app.stop()


def client(app: AppServer) -> httpx.Client:
    return httpx.Client(base_url=app.url, timeout=30, headers=AUTH)


def command_env(home, token: str | None) -> dict:  # noqa: ANN001
    """The home's environment for the command: the token given (or none), no report address of its own."""
    env = {**home.env(), **({"TINYGPT_API_TOKEN": token} if token else {})}
    env.pop("TINYGPT_REPORT_TO", None)
    return env


def tinygpt(home, *args: str, token: str | None = TOKEN, **popen) -> subprocess.Popen:  # noqa: ANN001
    return start_tinygpt(*args, env=command_env(home, token), **popen)


def here(home, *args: object, token: str | None = TOKEN) -> tuple[int, str, str]:  # noqa: ANN001
    """The command run inside the test process, for its messages (what is about processes runs as one)."""
    done = tinygpt_here(*args, env=command_env(home, token))
    return done.returncode, done.stdout, done.stderr


def finished(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def train(home, out: Path, url: str, *options: str, slice_path: Path, **kw) -> subprocess.Popen:  # noqa: ANN001
    return tinygpt(home, "train", *TRAIN, "--corpus", str(slice_path), "--out", str(out), "--report-to", url,
                   *options, **kw)


def api_rows(c: httpx.Client, run_id: int) -> list[dict]:
    return c.get(f"/api/runs/{run_id}/metrics").json()


def folder_rows(out: Path) -> list[dict]:
    return [asdict(m) for m in read_metrics_csv(out / "metrics.csv")]


def report_state(out: Path) -> dict:
    """The trainer's report state (empty before it starts)."""
    path = out / "report" / "state.json"
    return json.loads(path.read_text()) if path.exists() else {}


def test_a_reported_run_is_its_run_folder_row_for_row(dashboard, slice_path, tmp_path):
    home, app = dashboard
    out = tmp_path / "reported"
    code, stdout, stderr = finished(train(home, out, app.url, "--steps", "30", "--eval-every", "10", "--log-every", "2",
                                          "--name", "from-the-gpu-box", "--tag", "h200", "--notify", "failed,stalled",
                                          "--notify-url", "https://hooks.example.com/services/x",
                                          slice_path=slice_path))
    assert code == 0, stderr
    assert stderr == "" and "done: 30 steps" in stdout
    run_id = report_state(out)["run_id"]
    with client(app) as c:
        run = c.get(f"/api/runs/{run_id}").json()
        assert (run["status"], run["origin"], run["host"], run["name"], run["tags"]) == (
            "succeeded", "reported", socket.gethostname(), "from-the-gpu-box", ["h200"])
        assert (run["device"], run["precision"], run["last_step"], run["steps"]) == ("cpu", "fp32", 30, 30)
        assert run["config"]["batch_size"] == 2 and run["config"]["dataset"] == slice_path.stem
        assert run["config"]["notify"] == {"events": ["failed", "stalled"], "urls": ["https://hooks.example.com/services/x"]}
        rows = api_rows(c, run_id)
        assert rows == folder_rows(out) and len(rows) == 16  # steps 0, 2, ..., 30
        assert run["has_checkpoint"] and run["best_step"] == 30
        assert run["best_val_loss"] == min(r["val_loss"] for r in rows if r["val_loss"] is not None)
        printed = [int(line.split()[2].rstrip(":")) for line in stdout.splitlines() if line.startswith("sample @ ")]
        assert [s["step"] for s in c.get(f"/api/runs/{run_id}/samples").json()] == printed == [0, 10, 20, 30]
        sample = c.post(f"/api/runs/{run_id}/sample", json={"prompt": "Holmes", "max_tokens": 5, "seed": 1})
        assert sample.status_code == 200 and "event: end" in sample.text
        assert c.get(f"/api/runs/{run_id}/neighbors", params={"word": " Holmes", "k": 3}).status_code == 200
        recorded = c.get(f"/api/runs/{run_id}/head-scores").json()  # sent with the rows, as the folder has them
        folder_scores = read_head_scores(out / HEAD_SCORES_FILE)
        assert recorded["steps"] == sorted(folder_scores) == [0, 10, 20, 30]
        assert recorded["scores"]["induction"] == [folder_scores[s]["induction"] for s in (0, 10, 20, 30)]
    events = read_events(f"{app.url}/api/runs/{run_id}/events", headers=AUTH, timeout=30)
    streamed = [{k: v for k, v in e["data"].items() if k != "run_id"} for e in events if e["event"] == "metric"]
    assert streamed == rows  # live curves: every row once


def test_bad_addresses_and_tokens_stop_before_training_and_a_missing_dashboard_is_a_warning(dashboard, slice_path,
                                                                                            tmp_path):
    home, app = dashboard
    cases = [
        (app.url, "wrong-token", f"tinygpt train: error: the dashboard at {app.url} refused the API token (this "
                                 "dashboard needs its API token: send `Authorization: Bearer TOKEN`, or log in at /login)"),
        ("ftp://files.example", TOKEN, "tinygpt train: error: the dashboard URL must look like http://HOST:PORT, got "
                                       "'ftp://files.example'"),
        ("http//127.0.0.1:8000", TOKEN, "tinygpt train: error: the dashboard URL must look like http://HOST:PORT, got "
                                        "'http//127.0.0.1:8000'"),
    ]
    for i, (url, token, message) in enumerate(cases):
        code, _, stderr = here(home, "train", *TRAIN, "--corpus", slice_path, "--out", tmp_path / f"bad{i}",
                               "--report-to", url, "--steps", "5", token=token)
        assert (code, stderr) == (2, message + "\n")
        assert not (tmp_path / f"bad{i}" / "metrics.csv").exists()  # no training started
    out = tmp_path / "offline"
    nobody = f"http://127.0.0.1:{free_port()}"
    code, stdout, stderr = finished(train(home, out, nobody, "--steps", "6", "--eval-every", "3", slice_path=slice_path))
    assert code == 0 and "done: 6 steps" in stdout
    lines = stderr.splitlines()
    assert lines[0] == (f"tinygpt: warning: cannot reach {nobody} (Connection refused); training goes on, and what it "
                        f"reports waits in {out / 'report'} until the dashboard answers")
    waiting = pending(out)
    assert report_state(out)["sent_seq"] == 0 and lines[-1] == (f"tinygpt: warning: {waiting} report item(s) not sent yet; send them with "
                                          f"`tinygpt sync {out}` when the dashboard answers")
    # the dashboard answers later: everything goes once; a second sync has nothing left to send
    code, stdout, _ = here(home, "sync", out, "--url", app.url)
    run_id = report_state(out)["run_id"]
    assert (code, stdout) == (0, f"synced {out}: {waiting} item(s) sent; run {run_id}\n")
    code, stdout, _ = here(home, "sync", out, "--url", app.url)
    assert (code, stdout) == (0, f"synced {out}: 0 item(s) sent; run {run_id}\n")
    with client(app) as c:
        run = c.get(f"/api/runs/{run_id}").json()
        assert (run["status"], run["has_checkpoint"], run["last_step"]) == ("succeeded", True, 6)
        assert api_rows(c, run_id) == folder_rows(out)


def sqlite_only(home) -> None:  # noqa: ANN001
    """The long process tests: what they test does not depend on the database (their PostgreSQL run is skipped
    to keep CI under an hour; the reports' storage is tested on PostgreSQL by the other tests here)."""
    if "TINYGPT_DATABASE_URL" in home.extra_env:
        pytest.skip("nothing here depends on the database; the SQLite run covers it")


def pending(out: Path) -> int:
    """Journal items the dashboard has not acknowledged."""
    return len((out / "report" / "journal.jsonl").read_text().splitlines()) - report_state(out)["sent_seq"]


@pytest.mark.slow  # 60 s on 2 cores: 200 steps logged one by one across an app killed and restarted
def test_an_app_killed_mid_run_loses_no_row_and_duplicates_none(dashboard, slice_path, tmp_path):
    home, _ = dashboard
    sqlite_only(home)
    app = AppServer(home)  # its own app, killed and restarted on the same port
    port, out = app.port, tmp_path / "restart"
    proc = train(home, out, app.url, "--steps", "200", "--eval-every", "50", "--log-every", "1", slice_path=slice_path)
    try:
        with client(app) as c:
            wait_for(lambda: report_state(out).get("run_id") and len(api_rows(c, report_state(out)["run_id"])) >= 20,
                     timeout=120, message="rows before the kill")
        app.popen.kill()  # SIGKILL: no orderly shutdown
        app.popen.wait()
        warned = proc.stderr.readline()  # the trainer's next send fails: its warning, rows waiting in the journal
        assert warned.startswith(f"tinygpt: warning: cannot reach {app.url}") and pending(out) > 0
        # the trainer waits while the app restarts, so that it outlives the outage however fast the CPU (on a fast
        # one its last 180 steps took less than the restart)
        proc.send_signal(signal.SIGSTOP)
        try:
            app = AppServer(home, port=port)
        finally:
            proc.send_signal(signal.SIGCONT)
        code, _, stderr = finished(proc)
        assert code == 0, stderr
        assert "answers again" in stderr
        with client(app) as c:
            rows = api_rows(c, report_state(out)["run_id"])
        assert rows == folder_rows(out) and [r["step"] for r in rows] == list(range(201))
    finally:
        proc.kill()
        app.stop()


@pytest.mark.slow  # 30 s on 2 cores: a long run cancelled from the API
def test_cancel_from_the_dashboard_stops_the_trainer_at_a_step(dashboard, slice_path, tmp_path):
    home, app = dashboard
    sqlite_only(home)
    out = tmp_path / "cancelled"
    proc = train(home, out, app.url, "--steps", "100000", "--eval-every", "1000", slice_path=slice_path)
    with client(app) as c:
        run_id = wait_for(lambda: report_state(out).get("run_id"), message="the reported run")
        wait_for(lambda: c.get(f"/api/runs/{run_id}").json()["last_step"] >= 10, timeout=120, message="steps")
        assert c.post(f"/api/runs/{run_id}/cancel").json()["status"] == "running"  # asked: the trainer decides
        asked = time.monotonic()
        code, _, stderr = finished(proc, timeout=60)
        assert time.monotonic() - asked < 10
        run = c.get(f"/api/runs/{run_id}").json()
    stopped_at = re.fullmatch(rf"tinygpt train: cancelled from the dashboard at step (\d+); last.pt saved in {out}\n",
                              stderr.splitlines(keepends=True)[-1])
    assert code == 1 and stopped_at, stderr
    assert (run["status"], run["error"], run["last_step"]) == ("cancelled", "cancelled from the dashboard",
                                                               int(stopped_at.group(1)) // 10 * 10)
    assert (out / "last.pt").exists()


# -- the checkpoint upload: never executed, never read past its cap -----------------------------------
class Payload:
    """Unpickling this would create a folder: the proof that nothing was executed is that it does not exist."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        return os.mkdir, (str(self.marker),)


@pytest.fixture
def reported_run(dashboard) -> int:  # noqa: ANN001
    _, app = dashboard
    with client(app) as c:
        response = c.post("/api/runs/reported", json={"report_id": os.urandom(8).hex(), "name": "uploads",
                                                      "config": {"preset": "tiny", "steps": 10}})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def tiny_checkpoint(path: Path, tokenizer, **changes) -> Path:  # noqa: ANN001
    config = model_config("tiny", None, vocab_size=tokenizer.vocab_size)
    torch.manual_seed(0)
    state = {"model": GPT(config).state_dict(), "model_config": config.to_dict(), "tokenizer": tokenizer.to_dict(),
             "step": 7, "train_state": {"best_step": 7}, "best_val_loss": 6.5, **changes}
    save_checkpoint(path, state)
    return path


def test_an_uploaded_checkpoint_must_be_one(dashboard, reported_run, small_tokenizer, tmp_path):
    _, app = dashboard
    marker = tmp_path / "payload-ran"
    evil_zip = tmp_path / "evil.pt"
    torch.save({"version": 1, "model": Payload(marker)}, evil_zip)  # a real torch file whose pickle runs code
    forged = tiny_checkpoint(tmp_path / "forged.pt", small_tokenizer,
                             model_config={**model_config("tiny", None).to_dict(), "d_model": 100_000})
    cases = [
        (evil_zip.read_bytes(), "holds objects other than tensors and plain data (posix.mkdir)"),
        (pickle.dumps(Payload(marker)), "is not a readable checkpoint (not a PyTorch file of tensors"),
        (os.urandom(10_000), "is not a readable checkpoint"),
        (forged.read_bytes(), "is not a checkpoint of a tinygpt model"),
    ]
    url = f"/api/runs/{reported_run}/checkpoint"
    with client(app) as c:
        for body, message in cases:
            response = c.put(url, content=body, headers={"Content-Type": "application/octet-stream"})
            assert response.status_code == 422, response.text
            (error,) = response.json()["detail"]
            assert error["loc"] == ["body", "body"] and message in error["msg"], error
        assert not marker.exists()
        assert c.get(f"/api/runs/{reported_run}").json()["has_checkpoint"] is False
        # past the cap (5 MB here) while streaming, without a size announced: cut off with 413
        too_big = c.put(url, content=(b"\0" * 2**20 for _ in range(8)))
        assert too_big.status_code == 413 and "larger than the limit of 5 MB" in too_big.text
        good = c.put(url, content=tiny_checkpoint(tmp_path / "good.pt", small_tokenizer).read_bytes())
        assert good.status_code == 200, good.text
        run = c.get(f"/api/runs/{reported_run}").json()
        assert (run["has_checkpoint"], run["best_step"], run["best_val_loss"]) == (True, 7, 6.5)
        assert c.get(f"/api/runs/{reported_run}/checkpoint").content == (tmp_path / "good.pt").read_bytes()
    # a huge size announced: refused before the body is read (the answer comes while it is still "sending")
    with socket.create_connection(("127.0.0.1", app.port)) as s:
        s.sendall(f"PUT {url} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
                  f"Content-Type: application/octet-stream\r\nContent-Length: {10**12}\r\n\r\n".encode() + b"\0" * 4096)
        s.settimeout(10)
        assert s.recv(4096).startswith(b"HTTP/1.1 413 ")


def test_reports_are_applied_once_and_need_a_reported_run(dashboard, reported_run):
    _, app = dashboard
    row = {"step": 1, "train_loss": 5.0, "val_loss": None, "lr": 1e-3, "tokens_per_sec": 10.0, "elapsed_sec": 1.0,
           "tokens_seen": 64, "epochs": 0.01, "peak_mem_mib": 100.0}
    items = [{"seq": 1, "kind": "metric", "data": row}, {"seq": 2, "kind": "metric", "data": {**row, "step": 2}}]
    with client(app) as c:
        url = f"/api/runs/{reported_run}/report"
        assert c.post(url, json={"items": items}).json() == {"applied_seq": 2, "cancel_requested": False,
                                                             "status": "running"}
        # the same batch again (its answer was lost), and one with a gap: nothing changes
        assert c.post(url, json={"items": items}).json()["applied_seq"] == 2
        assert c.post(url, json={"items": [{"seq": 5, "kind": "log", "data": {"message": "x"}}]}).json()["applied_seq"] == 2
        assert [r["step"] for r in api_rows(c, reported_run)] == [1, 2]
        nan = c.post(url, json={"items": [{"seq": 3, "kind": "metric", "data": {**row, "train_loss": "NaN"}}]})
        assert nan.status_code == 422
        assert nan.json()["detail"][0]["msg"] == "train_loss must be a finite number, got nan"
        queued = c.post("/api/runs", json={"preset": "tiny", "steps": 5}).json()[0]["id"]
        refused = c.post(f"/api/runs/{queued}/report", json={"items": []})
        assert refused.status_code == 409 and "only reported runs take reports" in refused.json()["detail"]
        c.post(f"/api/runs/{queued}/cancel")
        bad = c.post("/api/runs/reported", json={"report_id": "not-hex", "name": "x", "config": {"steps": 0}})
        assert bad.status_code == 422
        assert {tuple(e["loc"]) for e in bad.json()["detail"]} == {("body", "report_id"), ("body", "config", "steps")}


# -- import and export ---------------------------------------------------------------------------------
def import_csv(home, app: AppServer, path: Path, options: dict, device: str, name: str) -> int:  # noqa: ANN001
    code, stdout, stderr = here(home, "import", path, "--url", app.url, "--config", json.dumps(options),
                                "--device-name", device, "--name", name)
    assert code == 0, stderr
    assert stdout.startswith(f"imported {path} as run ")
    return int(stdout.split()[4])


def test_import_other_trainers_files_with_the_command(dashboard, tmp_path):
    """``tinygpt import`` of a nanoGPT log and a SummaryWriter folder, against the real service."""
    from torch.utils.tensorboard import SummaryWriter

    from .test_foreign_logs import NANOGPT_LOG

    home, app = dashboard
    log = tmp_path / "train_shakespeare.log"
    log.write_text(NANOGPT_LOG)
    code, stdout, stderr = here(home, "import", log, "--url", app.url, "--tokens-per-step", "16384",
                                "--config", '{"max_iters": 5000}', "--device", "cuda", "--tag", "nanogpt")
    assert code == 0, stderr
    run_id = int(stdout.split()[5])
    assert stdout == f"imported {log} (nanogpt) as run {run_id} (12 values, 250 steps): {app.url}/runs/{run_id}\n"
    writer = SummaryWriter(str(tmp_path / "tb"))
    for step in range(3):
        writer.add_scalar("loss", 3.0 - step, step)
    writer.close()
    code, stdout, stderr = here(home, "import", tmp_path / "tb", "--url", app.url)
    assert code == 0, stderr
    tb_id = int(stdout.split()[5])
    with client(app) as c:
        run = c.get(f"/api/runs/{run_id}").json()
        assert (run["origin"], run["tags"], run["steps"], run["best_val_loss"]) == ("log_file", ["nanogpt"], 5000, 2.0645)
        assert [r["train_loss"] for r in api_rows(c, tb_id)] == [3.0, 2.0, 1.0]
    code, _, stderr = here(home, "import", tmp_path / "tb", "--url", app.url, "--tokens-per-step", "0")
    assert (code, stderr.splitlines()[-1]) == (2, "tinygpt import: error: argument --tokens-per-step: must be a "
                                                  "positive integer, got 0")
    notes = tmp_path / "notes.txt"
    notes.write_text("nothing here\n")
    code, _, stderr = here(home, "import", notes, "--url", app.url)
    assert (code, stderr) == (2, f"tinygpt import: error: {notes}: no line of nanoGPT (step N: train loss X, val "
                                 "loss Y / iter N: loss X, time Tms), llm.c (s:N trl:X / s:N tel:X) or modded-nanogpt "
                                 "(step:S/T val_loss:X ...) format\n")


def test_import_the_recorded_runs_and_export_them(dashboard):
    home, app = dashboard
    series = {"target_val_loss": 3.76}  # (this dashboard's holmes is a slice: no known target of its own)
    h200 = import_csv(home, app, RUNS / "h200-holmes-1500-bf16.csv", {**H200_OPTIONS, **series}, "NVIDIA H200",
                      "holmes H200 bf16")
    cpu = import_csv(home, app, RUNS / "cpu-holmes-1500-fp32.csv", {**CPU_OPTIONS, **series}, "AMD EPYC, 2 cores",
                     "holmes CPU fp32")
    modern = import_csv(home, app, RUNS / "cpu-holmes-modern-250-fp32.csv", {**CPU_OPTIONS, "arch": "modern"},
                        "AMD EPYC, 2 cores", "holmes modern CPU")
    code, _, stderr = here(home, "import", RUNS / "h200-holmes-1500-bf16.csv", "--url", app.url)
    assert (code, stderr.strip()) == (2, f"tinygpt import: error: {RUNS / 'h200-holmes-1500-bf16.csv'} is a bare "
                                         "metrics CSV: give its run options with --config (a JSON file or '{...}') "
                                         "and its device with --device-name")
    with client(app) as c:
        run = c.get(f"/api/runs/{h200}").json()
        assert (run["status"], run["origin"], run["device"], run["device_info"], run["precision"]) == (
            "succeeded", "imported", "cuda", {"name": "NVIDIA H200"}, "bf16")
        assert c.get(f"/api/runs/{modern}").json()["status"] == "cancelled"  # its metrics end at step 250 of 1500
        for run_id, name in [(h200, "h200-holmes-1500-bf16.csv"), (cpu, "cpu-holmes-1500-fp32.csv")]:
            assert api_rows(c, run_id) == [asdict(m) for m in read_metrics_csv(RUNS / name)]
        compared = c.get("/api/compare", params={"ids": f"{cpu},{h200}"}).json()
        assert compared["runs"][1]["speedup_vs_first"] > 100
        # time to the series' 3.76, by the recorded estimates: both at step 1,250 (10.24M tokens)
        to_target = [r["time_to_target"] for r in compared["runs"]]
        assert [(t["step"], t["tokens"], t["exact"]) for t in to_target] == [(1250, 10_240_000, False)] * 2
        assert compared["runs"][1]["target_speedup_vs_first"] == pytest.approx(22397.656 / 21.909, rel=1e-4)
        assert compared["runs"][1]["target_tokens_vs_first"] == 1.0
        assert compared["runs"][0]["target_speedup_vs_first"] == 1.0
        evals = {run_id: {r["step"]: r["val_loss"] for r in api_rows(c, run_id) if r["val_loss"] is not None}
                 for run_id in (cpu, h200)}
        assert compared["max_val_loss_gap"] == max(abs(evals[cpu][s] - evals[h200][s]) for s in evals[cpu])

        ids = f"{h200},{cpu},{modern}"
        exported = c.get("/api/export", params={"ids": ids})
        assert exported.headers["content-type"].startswith("text/csv")
        table = list(csv.DictReader(io.StringIO(exported.text)))
        lines = [json.loads(line) for line in c.get("/api/export", params={"ids": ids, "format": "jsonl"}).text.splitlines()]
        for run_id in (h200, cpu, modern):
            run, rows = c.get(f"/api/runs/{run_id}").json(), api_rows(c, run_id)
            mine = [r for r in lines if r["run_id"] == run_id]
            target = run["time_to_target"] or {}
            assert mine == [{"run_id": run_id, "name": run["name"], "notes": run["notes"], "group_id": run["group_id"],
                             "group": run["group_name"], "device": run["device"],
                             "precision": run["precision"],
                             "target_val_loss": run["target_val_loss"], "target_step": target.get("step"),
                             "target_sec": target.get("seconds"),
                             **{k: r[k] for k in ("step", "train_loss", "val_loss", "lr", "tokens_per_sec", "tokens_seen",
                                                  "elapsed_sec", "val_loss_full")}, "val_bpb": None} for r in rows]
            assert [(float(r["train_loss"]), r["val_loss"] and float(r["val_loss"])) for r in table
                    if r["run_id"] == str(run_id)] == [(r["train_loss"], r["val_loss"] or "") for r in rows]
        assert len(table) == len(lines) == sum(len(api_rows(c, i)) for i in (h200, cpu, modern))
        assert c.get("/api/export", params=[("ids", str(cpu)), ("ids", str(h200))]).text.count("\n") == 1 + 151 + 151
        missing = c.get("/api/export", params={"ids": f"{cpu},999999"})
        assert (missing.status_code, missing.json()["detail"]) == (404, "run 999999 does not exist")
        bad = c.get("/api/export", params={"ids": "1,x"})
        assert bad.status_code == 422 and bad.json()["detail"][0]["msg"] == "ids must be comma-separated run ids"
