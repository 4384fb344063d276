"""Runs from elsewhere in Chromium: the recorded CPU and H200 runs imported side by side on the comparison
page, a reported run's page marked as such and live, and the run list's "Export selected"."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import httpx
import pytest

from app.templating import ratio_text
from tinygpt.records import duration_text
from tinygpt.run_import import import_payload

from .browser import needs_chromium, open_page, shot
from .service_helpers import AppServer
from .test_reporting import CPU_OPTIONS, H200_OPTIONS, RUNS

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def site(start_service):
    return start_service("report-pages").app


def imported(app: AppServer, csv_path: Path, options: dict, device: str, name: str) -> int:
    payload, _ = import_payload(csv_path, config_arg=json.dumps(options), device_name=device, name=name)
    response = httpx.post(f"{app.url}/api/runs/import", json=payload, timeout=30)
    assert response.status_code == 201, response.text
    return response.json()["id"]


@pytest.mark.slow  # 25 s on 2 cores: Chromium over three pages
def test_cpu_and_h200_side_by_side_a_reported_run_live_and_export_selected(site, browser, tmp_path):
    cpu = imported(site, RUNS / "cpu-holmes-1500-fp32.csv", CPU_OPTIONS, "AMD EPYC (2 cores)", "holmes 1500 CPU fp32")
    h200 = imported(site, RUNS / "h200-holmes-1500-bf16.csv", H200_OPTIONS, "NVIDIA H200", "holmes 1500 H200 bf16")
    compared = httpx.get(f"{site.url}/api/compare", params={"ids": f"{cpu},{h200}"}).json()
    page = open_page(browser)
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{site.url}/compare?ids={cpu},{h200}")
    page.wait_for_selector("#compare-chart canvas")
    speedups = page.locator("td.speedup").all_inner_texts()
    assert speedups == ["1.00x", ratio_text(compared["runs"][1]["speedup_vs_first"])] and float(speedups[1][:-1]) > 300
    assert speedups[1] == f"{compared['runs'][1]['speedup_vs_first']:.3g}x"  # three digits, not 371.24x
    assert page.locator("td.training-time").all_inner_texts() == [duration_text(r["training_sec"])
                                                                  for r in compared["runs"]]
    assert page.locator("td.training-time").first.inner_text().endswith(" min")  # hours and minutes, not 23939.9 s
    assert "None" not in page.inner_text("table.config")  # an option left unset reads "–"
    gap = page.inner_text("#curve-gap")
    assert gap.startswith(f"Largest gap between the curves at shared evaluation steps: val "
                          f"{compared['max_val_loss_gap']:.4f}") and "(7 shared steps)" in gap
    trained_by = page.locator("table.compare tr", has=page.locator("th", has_text="trained by")).locator("td")
    assert trained_by.all_inner_texts() == ["imported", "imported"]
    devices = page.locator("table.compare tr", has=page.locator("th", has_text="device")).first.inner_text()
    assert "NVIDIA H200" in devices and "bf16" in devices and "AMD EPYC (2 cores)" in devices
    shot(page, "compare-cpu-h200-imported")

    # a run reported from elsewhere: marked on its page, and its rows arrive live
    run = httpx.post(f"{site.url}/api/runs/reported", json={
        "report_id": os.urandom(8).hex(), "name": "from the gpu box", "host": "gpu-box", "device": "cuda",
        "config": {"preset": "tiny", "steps": 100, "eval_every": 50}}).json()
    page.goto(f"{site.url}/runs/{run['id']}")
    assert page.inner_text("#origin-desc").startswith("reported trained on gpu-box by tinygpt train --report-to")
    row = {"train_loss": 5.0, "val_loss": None, "lr": 1e-3, "tokens_per_sec": 5e5, "elapsed_sec": 1.0,
           "tokens_seen": 4096, "epochs": 0.01, "peak_mem_mib": 900.0}
    items = [{"seq": 1, "kind": "start", "data": {"device": "cuda:0", "device_info": {"name": "NVIDIA H200"},
                                                  "precision": "bf16", "params": 475_712}}]
    items += [{"seq": 2 + i, "kind": "metric", "data": {**row, "step": 10 * i, "train_loss": 5.0 - i / 10}}
              for i in range(6)]
    assert httpx.post(f"{site.url}/api/runs/{run['id']}/report", json={"items": items}).json()["applied_seq"] == 7
    page.wait_for_function("document.getElementById('progress-text').textContent.trim() === '50 / 100'")
    assert "NVIDIA H200" in page.inner_text("#device-desc")
    shot(page, "run-reported")

    page.goto(f"{site.url}/")
    assert "reported" in page.inner_text(f"#run-{run['id']} td.worker")
    assert page.inner_text(f"#run-{h200} td.worker") == "imported"
    for run_id in (cpu, h200):
        page.check(f"input[name=ids][value='{run_id}']")
    with page.expect_download() as download:
        page.click("#export-btn")
    table = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    assert [(r["run_id"], r["device"], r["precision"]) for r in table[:1] + table[-1:]] == [
        (str(h200), "cuda", "bf16"), (str(cpu), "cpu", "fp32")]  # in the list's order: newest first
    assert len(table) == 151 + 151
    page.context.close()
    assert page.js_errors == [], page.js_errors
