"""Live reporting (``tinygpt train --report-to``): what it costs the training step, and how soon a
metrics row written by the trainer reaches a page's event stream.

- Cost: the same 300-step tiny run (batch 8, one CPU thread, a row logged at every step: the most
  reporting there can be) with and without ``--report-to`` a dashboard on this machine, alternating,
  7 rounds; speed = the median tokens/s of its logged intervals (``metrics.csv``, evaluation
  excluded); the figure is the median of the rounds' ratios (each pair run back to back, so the
  machine's slow drifts, which move single runs by 10% here, cancel).
- Latency: for each row of a reported run, from the moment the trainer appended it to its journal
  (the journal's ``at``) to its arrival on the run's event stream (``GET /api/runs/{id}/events``,
  what the run page reads), same clock, same machine.

    python -m benchmarks.bench_report
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from .common import ROOT, holmes_path

sys.path.insert(0, str(ROOT))
from tests.service_helpers import AppServer, Home, wait_for  # noqa: E402

TRAIN = ["--preset", "tiny", "--steps", "300", "--eval-every", "300", "--eval-batches", "2", "--batch-size", "8",
         "--log-every", "1", "--sample-tokens", "0", "--threads", "1", "--precision", "fp32", "--no-progress"]


def train(home: Home, out: Path, url: str | None) -> float:
    """Run ``tinygpt train`` to its end; the median tokens/s of its logged intervals."""
    report = ["--report-to", url] if url else []
    subprocess.run([sys.executable, "-m", "app.cli", "train", *TRAIN, "--out", str(out), *report], cwd=ROOT,
                   env=home.env(), check=True, capture_output=True)
    rows = [line.split(",") for line in (out / "metrics.csv").read_text().splitlines()[1:]]
    return statistics.median(float(r[4]) for r in rows if float(r[4]) > 0)


def arrivals(url: str, run_id: int, seen: dict[int, float], stop: threading.Event) -> None:
    """Read the run's event stream; the arrival time of each metric row, by step."""
    with httpx.stream("GET", f"{url}/api/runs/{run_id}/events", timeout=None) as response:
        event = None
        for line in response.iter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event == "metric":
                seen.setdefault(json.loads(line[5:])["step"], time.time())
            elif line.startswith("data:") and event == "end" or stop.is_set():
                return


def latency(home: Home, app: AppServer, out: Path) -> dict:
    """A reported run watched from its stream: seconds from journal to stream, per row."""
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "train", *TRAIN, "--out", str(out), "--report-to",
                             app.url], cwd=ROOT, env=home.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = out / "report" / "state.json"
    run_id = wait_for(lambda: state.exists() and json.loads(state.read_text()).get("run_id"), timeout=60,
                      message="the reported run")
    seen: dict[int, float] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=arrivals, args=(app.url, run_id, seen, stop), daemon=True)
    subscribed = time.time()
    watcher.start()
    proc.wait()
    watcher.join(timeout=30)
    stop.set()
    written = {item["data"]["step"]: item["at"] for item in map(json.loads, (out / "report" / "journal.jsonl")
                                                                 .read_text().splitlines()) if item["kind"] == "metric"}
    delays = sorted(seen[s] - written[s] for s in written if s in seen and written[s] > subscribed + 1)
    return {"rows": len(delays), "p50_ms": round(1000 * delays[len(delays) // 2]),
            "p95_ms": round(1000 * delays[int(len(delays) * 0.95)]), "max_ms": round(1000 * delays[-1])}


def run(rounds: int = 7) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        home = Home(Path(tmp) / "home", holmes_path())
        home.path.mkdir()
        app = AppServer(home)
        try:
            train(home, Path(tmp) / "warm-up", None)  # tokenizer and token cache
            rates: dict[str, list[float]] = {"unreported": [], "reported": []}
            for i in range(rounds):
                for name in ("unreported", "reported"):
                    rates[name].append(train(home, Path(tmp) / f"{name}-{i}", app.url if name == "reported" else None))
            delays = latency(home, app, Path(tmp) / "latency")
        finally:
            app.stop()
    plain, reported = statistics.median(rates["unreported"]), statistics.median(rates["reported"])
    ratios = [r / p for r, p in zip(rates["reported"], rates["unreported"], strict=True)]
    return {"unreported_tokens_per_sec": round(plain), "reported_tokens_per_sec": round(reported),
            "ratio": round(statistics.median(ratios), 3), "round_ratios": [round(r, 3) for r in ratios],
            "rounds": rates, "latency": delays}


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
