"""Other trainers' scripts reporting live: how soon a value a script logs reaches the run page's event stream.

For each client (MLflow's official client, ``mlflow.log_metric(step=)``, in its own virtual environment; the
W&B-style drop-in, ``wandb.log``), a script logs one value every 50 ms for 200 steps against a ``tinygpt app``
on this machine and writes down when each call began; the benchmark reads the run's event stream
(``GET /api/runs/{id}/events``, what the run page reads) and takes, per step, arrival minus call. Same clock,
same machine (loopback).

    python -m benchmarks.bench_tracking
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from tinygpt.device import cpu_summary

from .bench_report import arrivals
from .common import ROOT, holmes_path, machine

sys.path.insert(0, str(ROOT))
from tests.service_helpers import AppServer, Home, wait_for  # noqa: E402

STEPS = 200
MLFLOW_VERSION = "3.17.2"  # the newest of the two the tests use (scripts/install-mlflow-clients.sh)

MLFLOW_SCRIPT = f"""
import json, sys, time
import mlflow
mlflow.set_experiment("latency")
sent = {{}}
with mlflow.start_run(run_name=sys.argv[1]):
    time.sleep(3)  # the benchmark subscribes to the run's stream
    for step in range({STEPS}):
        sent[step] = time.time()
        mlflow.log_metric("train/loss", 5.0 - step / 1000, step=step)
        time.sleep(0.05)
print(json.dumps(sent))
"""

WANDB_SCRIPT = f"""
import json, sys, time
import wandb
wandb.init(project="latency", name=sys.argv[1])
time.sleep(3)
sent = {{}}
for step in range({STEPS}):
    sent[step] = time.time()
    wandb.log({{"train/loss": 5.0 - step / 1000}}, step=step)
    time.sleep(0.05)
wandb.finish()
print(json.dumps(sent))
"""


def client(kind: str, url: str, name: str, tmp: Path) -> tuple[list[str], dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "MLFLOW_"))}
    if kind == "mlflow":
        python = ROOT / ".venv" / f"mlflow-{MLFLOW_VERSION}" / "bin" / "python"
        script = tmp / "mlflow_script.py"
        script.write_text(MLFLOW_SCRIPT)
        return [str(python), str(script), name], env | {"MLFLOW_TRACKING_URI": url}
    dropin = subprocess.run([sys.executable, "-m", "tinygpt", "wandb-path"], capture_output=True, text=True,
                            check=True, cwd=ROOT).stdout.strip()
    script = tmp / "wandb_script.py"
    script.write_text(WANDB_SCRIPT)
    return [sys.executable, str(script), name], env | {"PYTHONPATH": dropin, "WANDB_BASE_URL": url}


def latency(kind: str, app: AppServer, tmp: Path) -> dict:
    """One script's run watched from its stream: milliseconds from the script's call to the stream, per step."""
    name = f"latency-{kind}"
    command, env = client(kind, app.url, name, tmp)
    proc = subprocess.Popen(command, env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def the_run() -> int | None:
        items = httpx.get(f"{app.url}/api/runs", params={"limit": 100}, timeout=30).json()["items"]
        return next((r["id"] for r in items if r["name"] == name), None)

    run_id = wait_for(the_run, timeout=60, message=f"the {kind} run")
    seen: dict[int, float] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=arrivals, args=(app.url, run_id, seen, stop), daemon=True)
    watcher.start()
    out, err = proc.communicate(timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"the {kind} script failed: {err[-2000:]}")
    time.sleep(2)  # the last values' way to the stream
    stop.set()
    sent = {int(k): v for k, v in json.loads(out.strip().splitlines()[-1]).items()}
    delays = sorted(seen[s] - sent[s] for s in sent if s in seen)
    return {"values": len(delays), "of": STEPS, "p50_ms": round(1000 * delays[len(delays) // 2]),
            "p95_ms": round(1000 * delays[int(len(delays) * 0.95)]), "max_ms": round(1000 * delays[-1])}


def run() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        home = Home(Path(tmp) / "home", holmes_path())
        home.path.mkdir()
        app = AppServer(home)
        try:
            return {"mlflow_version": MLFLOW_VERSION, "machine": machine(), "cpu": cpu_summary(),
                    "date": datetime.date.today().isoformat(),
                    **{kind: latency(kind, app, Path(tmp)) for kind in ("mlflow", "wandb")}}
        finally:
            app.stop()


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
