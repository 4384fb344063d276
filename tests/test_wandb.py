"""W&B-style scripts report here with environment changes only: the drop-in ``wandb`` the dashboard ships
(``tinygpt wandb-path``), put first on a real script's path in a subprocess, against a real ``tinygpt app``; the
run compared with a dashboard run of the holmes preset on the compare page, in Chromium."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from .browser import open_page, shot
from .conftest import IMPORTED_RUN
from .service_helpers import ROOT, wait_for

TOKEN = "wandb-test-token-0123456789abcdef0123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

# nanoGPT's train.py, its W&B calls and names as it makes them (wandb_log=True), with the training left out
NANOGPT_SCRIPT = """
import os, sys, time
batch_size, block_size, gradient_accumulation_steps = 8, 256, 1
max_iters, eval_interval, learning_rate = 40, 10, 6e-4
wandb_log, wandb_project, wandb_run_name = True, "holmes-wandb", sys.argv[1]
config_keys = [k for k, v in globals().items() if not k.startswith("_") and isinstance(v, (int, float, bool, str))]
config = {k: globals()[k] for k in config_keys}
if wandb_log:
    import wandb
    wandb.init(project=wandb_project, name=wandb_run_name, config=config)
gate = sys.argv[2] if len(sys.argv) > 2 else None
for iter_num in range(max_iters + 1):
    if iter_num % eval_interval == 0 and wandb_log:
        losses = {"train": 5.0 - iter_num / 20, "val": 5.25 - iter_num / 20}
        wandb.log({"iter": iter_num, "train/loss": losses["train"], "val/loss": losses["val"], "lr": learning_rate,
                   "mfu": 10.0 + iter_num / 8})
    if gate and iter_num == 20:  # halfway: the test looks at the run while it runs
        while not os.path.exists(gate):
            time.sleep(0.05)
wandb.summary["best_val_loss"] = 5.25 - max_iters / 20
print(wandb.__version__)
"""

ENDLESS_SCRIPT = """
import sys, time
import wandb
run = wandb.init(project="holmes-wandb", name=sys.argv[1])
step = 0
while True:
    wandb.log({"loss": 5.0 - step / 1000})
    step += 1
    if step == 3 and sys.argv[2] == "fail":
        raise ValueError("diverged")
    time.sleep(0.05)
"""


def run_script(script: str, url: str, tmp_path: Path, *args: str, wait: bool = True) -> subprocess.Popen | \
        subprocess.CompletedProcess:
    path = tmp_path / "train.py"
    path.write_text(script)
    dropin = subprocess.run([sys.executable, "-m", "tinygpt", "wandb-path"], capture_output=True, text=True,
                            check=True, cwd=ROOT).stdout.strip()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env |= {"PYTHONPATH": dropin, "WANDB_BASE_URL": url, "WANDB_API_KEY": TOKEN}
    command = [sys.executable, str(path), *args]
    if not wait:
        return subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    return subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def service(start_service):
    return start_service("wandb", TINYGPT_API_TOKEN=TOKEN, TINYGPT_CLIENT_SILENT_SEC="3")


def the_run(c: httpx.Client, name: str) -> dict:
    return next(r for r in c.get("/api/runs", params={"limit": 100}).json()["items"] if r["name"] == name)


def test_a_nanogpt_script_reports_live_with_environment_changes_only(service, tmp_path, browser):
    url = service.app.url
    gate = tmp_path / "go-on"
    script = run_script(NANOGPT_SCRIPT, url, tmp_path, "nanogpt-wandb", str(gate), wait=False)
    with httpx.Client(base_url=url, headers=AUTH, timeout=30) as c:
        wait_for(lambda: any(r["name"] == "nanogpt-wandb" and r["last_step"] == 20
                             for r in c.get("/api/runs", params={"limit": 100}).json()["items"]), timeout=60,
                 message="the script's first rows, live")
        live = the_run(c, "nanogpt-wandb")
        assert (live["status"], live["origin"], live["stoppable"]) == ("running", "wandb", True)
        page = open_page(browser, extra_http_headers=AUTH)
        page.goto(f"{url}/runs/{live['id']}")
        assert page.inner_text("#origin-desc") == (
            f"wandb a W&B-style script (train.py) on {live['host']}, reporting through the dashboard's drop-in wandb")
        assert page.is_visible("#cancel-btn")  # its drop-in reads the answer: a cancel reaches the script
        page.wait_for_function("window.runState.rows.length === 3")
        gate.write_text("")
        page.wait_for_function("window.runState.rows.length === 5", timeout=30_000)  # the rest, live
        assert page.evaluate("window.runState.charts.loss.data.slice(0, 3)") == [
            [0, 10, 20, 30, 40], [5.0 - s / 20 for s in (0, 10, 20, 30, 40)], [5.25 - s / 20 for s in (0, 10, 20, 30, 40)]]
        page.reload()
        assert page.inner_text("#series-mapping").splitlines() == [
            "iter -> step", "lr -> learning rate", "train/loss -> training loss", "val/loss -> validation loss"]
        page.wait_for_function("window.runState.seriesCharts && window.runState.seriesCharts.length === 1")
        assert page.evaluate("window.runState.seriesCharts[0].data") == [
            [0, 10, 20, 30, 40], [10.0 + s / 8 for s in (0, 10, 20, 30, 40)]]
        shot(page, "run-wandb-nanogpt")
        page.context.close()
        assert page.js_errors == [], page.js_errors
        out, err = script.communicate(timeout=60)
        assert script.returncode == 0, err
        assert out.strip() == "0.0.0+tinygpt"  # the drop-in answered `import wandb`, not W&B's package
        assert err.splitlines()[0] == f"wandb (TinyGPT Dashboard drop-in): reporting to {url}/runs/{live['id']}"
        run = c.get(f"/api/runs/{live['id']}").json()
        assert (run["status"], run["steps"], run["last_step"], run["best_val_loss"], run["best_step"]) == (
            "succeeded", 40, 40, 5.25 - 40 / 20, 40)
        assert (run["group_name"], run["name"]) == ("holmes-wandb", "nanogpt-wandb")
        assert {k: run["config"][k] for k in ("batch_size", "block_size", "max_iters", "learning_rate")} == {
            "batch_size": 8, "block_size": 256, "max_iters": 40, "learning_rate": 6e-4}
        rows = c.get(f"/api/runs/{run['id']}/metrics").json()
        assert [(r["step"], r["train_loss"], r["val_loss"], r["lr"], r["tokens_seen"]) for r in rows] == [
            (s, 5.0 - s / 20, 5.25 - s / 20, 6e-4, s * 8 * 256) for s in (0, 10, 20, 30, 40)]
        series = {s["name"]: s for s in c.get(f"/api/runs/{run['id']}/series").json()}
        assert series["mfu"]["values"] == [10.0 + s / 8 for s in (0, 10, 20, 30, 40)]
        assert (series["val/loss"]["column"], series["iter"]["steps"]) == ("val_loss", [0, 10, 20, 30, 40])
        assert run["client_tags"]["summary.best_val_loss"] == "3.25"


@pytest.mark.parametrize("ending, status, error", [
    ("cancel", "cancelled", None), ("fail", "failed", "its script exited with code 1")])
def test_a_cancel_stops_the_script_and_a_failing_one_ends_failed(service, tmp_path, ending, status, error):
    url = service.app.url
    script = run_script(ENDLESS_SCRIPT, url, tmp_path, f"endless-{ending}", ending, wait=False)
    with httpx.Client(base_url=url, headers=AUTH, timeout=30) as c:
        wait_for(lambda: any(r["name"] == f"endless-{ending}" for r in c.get("/api/runs").json()["items"]),
                 timeout=60, message="the run")
        run_id = the_run(c, f"endless-{ending}")["id"]
        # the run exists at wandb.init; stop it once it has logged (a slow machine's first send comes later)
        wait_for(lambda: c.get(f"/api/runs/{run_id}").json()["last_step"] > 0, timeout=60, message="a logged step")
        if ending == "cancel":
            assert c.post(f"/api/runs/{run_id}/cancel").status_code == 200
        _, err = script.communicate(timeout=60)
        assert script.returncode == (-signal.SIGINT if ending == "cancel" else 1)  # Python's end on Ctrl-C
        assert ("KeyboardInterrupt" if ending == "cancel" else "ValueError: diverged") in err.splitlines()[-1]
        wait_for(lambda: c.get(f"/api/runs/{run_id}").json()["status"] == status, timeout=30, message=status)
        ended = c.get(f"/api/runs/{run_id}").json()
        assert (ended["error"], ended["last_step"] > 0) == (error, True)


def test_a_killed_script_ends_crashed(service, tmp_path):
    url = service.app.url
    script = run_script(ENDLESS_SCRIPT, url, tmp_path, "killed-wandb", "run", wait=False)
    with httpx.Client(base_url=url, headers=AUTH, timeout=30) as c:
        wait_for(lambda: any(r["name"] == "killed-wandb" and r["last_step"] > 2
                             for r in c.get("/api/runs").json()["items"]), timeout=60, message="the run's rows")
        script.send_signal(signal.SIGKILL)
        script.communicate(timeout=30)
        run_id = the_run(c, "killed-wandb")["id"]
        wait_for(lambda: c.get(f"/api/runs/{run_id}").json()["status"] == "crashed", timeout=60, message="crashed")
        assert c.get(f"/api/runs/{run_id}").json()["error"] == (
            "its W&B-style drop-in sent nothing for 3 s (the script stopped without ending the run); a value it "
            "logs later resumes it")


def test_an_unreachable_dashboard_never_stops_the_script(tmp_path):
    started = time.monotonic()
    done = run_script(NANOGPT_SCRIPT, "http://127.0.0.1:9", tmp_path, "offline")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0].startswith(
        "wandb (TinyGPT Dashboard drop-in): cannot reach the dashboard at http://127.0.0.1:9 (")
    assert time.monotonic() - started < 30


def test_the_wandb_run_compares_with_a_holmes_run_by_step_and_tokens(service, tmp_path, browser):
    url = service.app.url
    done = run_script(NANOGPT_SCRIPT, url, tmp_path, "nanogpt-compare")
    assert done.returncode == 0, done.stderr
    metrics = [{**row, "step": 4 * row["step"], "tokens_seen": 4 * row["step"] * 4096,
                "val_loss": 5.0 - row["step"] / 5 if row["step"] % 5 == 0 else None} for row in IMPORTED_RUN["metrics"]]
    holmes = httpx.post(f"{url}/api/runs/import", headers=AUTH, timeout=30, json={
        **IMPORTED_RUN, "name": "holmes preset", "metrics": metrics,
        "config": {"preset": "holmes", "steps": 40, "eval_every": 20}}).json()["id"]
    with httpx.Client(base_url=url, headers=AUTH, timeout=30) as c:
        theirs = the_run(c, "nanogpt-compare")["id"]
    page = open_page(browser, extra_http_headers=AUTH)
    page.goto(f"{url}/compare?ids={holmes},{theirs}")
    chart = "document.getElementById('compare-chart').uplot"
    labels = page.evaluate(f"{chart}.series.slice(1).map(s => s.label)")
    # a script's device is not known here: its requested device, auto, as for any run not yet placed
    assert labels == [f"#{holmes} train", f"#{holmes} val (cpu)", f"#{theirs} train", f"#{theirs} val (auto)"]
    steps = sorted({4 * s for s in range(11)} | {0, 10, 20, 30, 40})
    at = lambda values: [values.get(x) for x in steps]  # noqa: E731 (one column of the joined table)
    assert page.evaluate(f"{chart}.data") == [
        steps, at({4 * s: 5.0 - s / 10 for s in range(11)}), at({0: 5.0, 20: 4.0, 40: 3.0}),
        at({s: 5.0 - s / 20 for s in (0, 10, 20, 30, 40)}), at({s: 5.25 - s / 20 for s in (0, 10, 20, 30, 40)})]
    page.select_option("#x-axis", "tokens_seen")
    xs = page.evaluate(f"{chart}.data[0]")
    assert xs == sorted({4 * s * 4096 for s in range(11)} | {s * 8 * 256 for s in (0, 10, 20, 30, 40)})
    shot(page, "compare-wandb-holmes")
    page.context.close()
    assert page.js_errors == [], page.js_errors
