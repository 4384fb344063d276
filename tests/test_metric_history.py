"""A long run's history: the columns request (whole, a step range, thinned in the database) against a real
app, and charts whose tick labels read (SI form, hours:minutes) and never overlap, in Chromium."""

from __future__ import annotations

import json
import math
import random
import re

import httpx
import pytest

from .browser import needs_chromium, open_page, shot
from .service_helpers import AppServer, make_home

ROWS = 20_000
EVAL_EVERY = 500
TOKENS_PER_STEP = 75_000  # a big GPU batch: 1.5 billion tokens by the last step


def synthetic_rows(n: int = ROWS) -> list[dict]:
    """A loss curve with noise, an evaluation every EVAL_EVERY steps; tokens in the billions, hours of time."""
    rng = random.Random(0)
    rows = []
    for step in range(n):
        loss = 2.0 + 6.0 * math.exp(-step / 3000) + rng.uniform(-0.3, 0.3)
        rows.append({"step": step, "train_loss": loss, "val_loss": loss + 0.1 if step % EVAL_EVERY == 0 else None,
                     "lr": 1e-3, "tokens_per_sec": 250_000.0 + step, "elapsed_sec": step * 1.7,
                     "tokens_seen": step * TOKENS_PER_STEP, "epochs": step / 1000, "peak_mem_mib": 9000.0})
    return rows


@pytest.fixture(scope="module")
def long_run(tmp_path_factory, slice_path, warm_cache, database_slow_pg):
    home = make_home(tmp_path_factory.mktemp("history"), slice_path, warm_cache, **database_slow_pg)
    app = AppServer(home)
    rows = synthetic_rows()
    body = {"name": "long run", "device": "cuda", "precision": "bf16", "device_info": {"name": "NVIDIA H200"},
            "config": {"preset": "holmes", "steps": ROWS - 1, "eval_every": EVAL_EVERY}, "metrics": rows}
    response = httpx.post(f"{app.url}/api/runs/import", json=body, timeout=120)
    assert response.status_code == 201, response.text
    yield app, response.json()["id"], rows
    app.stop()


def columns(app: AppServer, run_id: int, **params) -> dict:
    response = httpx.get(f"{app.url}/api/runs/{run_id}/metrics", params={"format": "columns", **params}, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def test_the_whole_history_a_range_and_a_thinned_one(long_run):
    app, run_id, rows = long_run
    whole = columns(app, run_id)  # every row: streamed, read 5,000 rows at a time
    assert (whole["rows"], whole["downsampled"]) == (ROWS, False)
    streamed = httpx.get(f"{app.url}/api/runs/{run_id}/metrics", params={"format": "columns"}, timeout=60)
    assert streamed.headers.get("transfer-encoding") == "chunked" and "content-length" not in streamed.headers
    empty = columns(app, run_id, from_step=ROWS + 5)
    assert (empty["rows"], empty["columns"]["step"], empty["columns"]["val_loss"]) == (0, [], [])
    missing = httpx.get(f"{app.url}/api/runs/999999/metrics", params={"format": "columns"}, timeout=60)
    assert (missing.status_code, missing.json()) == (404, {"detail": "run 999999 does not exist"})
    assert whole["columns"]["step"] == [r["step"] for r in rows]
    assert whole["columns"]["train_loss"] == [r["train_loss"] for r in rows]
    assert whole["last_event_id"] == max(e["id"] for e in _events(app, run_id) if "id" in e)

    part = columns(app, run_id, from_step=1000, to_step=1999, max_points=2000)  # a zoomed range: every row
    assert (part["rows"], part["downsampled"]) == (1000, False)
    assert part["columns"]["step"] == list(range(1000, 2000))

    thin = columns(app, run_id, max_points=1000)
    steps, losses = thin["columns"]["step"], thin["columns"]["train_loss"]
    assert thin["rows"] == ROWS and thin["downsampled"] and len(steps) <= 1000 + ROWS // EVAL_EVERY
    assert steps == sorted(set(steps)) and steps[0] == 0 and steps[-1] == ROWS - 1
    evals = {r["step"]: r["val_loss"] for r in rows if r["val_loss"] is not None}
    assert {s: v for s, v in zip(steps, thin["columns"]["val_loss"], strict=True) if v is not None} == evals
    assert min(losses) == min(r["train_loss"] for r in rows) and max(losses) == max(r["train_loss"] for r in rows)
    bad = httpx.get(f"{app.url}/api/runs/{run_id}/metrics", params={"format": "columns", "max_points": 1})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "max_points"]


def _events(app: AppServer, run_id: int) -> list[dict]:
    from .service_helpers import read_events

    return read_events(f"{app.url}/api/runs/{run_id}/events", timeout=60)


@needs_chromium
@pytest.mark.parametrize("width", [420, 1280])
def test_axis_labels_read_and_never_overlap(long_run, browser, width):
    app, run_id, _ = long_run
    page = open_page(browser)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{app.url}/runs/{run_id}")
    page.wait_for_function(f"window.runState && window.runState.loaded && "
                           f"document.getElementById('progress-text').textContent.startsWith('{ROWS - 1} ')",
                           timeout=60_000)
    for key, label in [("tokens_seen", r"^\d+(\.\d+)?[kMB]?$"), ("elapsed_sec", r"^(\d+s|\d+:\d\d|\d+:\d\dh)$"),
                       ("step", r"^\d+(\.\d+)?k?$")]:
        page.select_option("#x-axis", key)
        ticks = page.evaluate("""() => {
          const out = [];
          for (const [name, u] of Object.entries(window.runState.charts)) {
            const axis = u.axes[0], ctx = u.ctx;
            ctx.font = axis.font[0];
            const labels = axis._values, pos = axis._splits.map((v) => u.valToPos(v, "x"));
            out.push({ name, labels, pos, widths: labels.map((l) => ctx.measureText(l).width / devicePixelRatio) });
          }
          return out;
        }""")
        for t in ticks:
            shown = [(p, w, lab) for p, w, lab in zip(t["pos"], t["widths"], t["labels"], strict=True) if lab]
            assert len(shown) >= 2, (key, t)
            for lab in t["labels"]:
                assert lab is None or re.match(label, lab), (key, t["name"], lab)
            for (p1, w1, _), (p2, w2, _) in zip(shown, shown[1:], strict=False):
                assert p2 - p1 >= (w1 + w2) / 2 + 4, (key, t["name"], width, shown)  # a gap between each pair
        if width == 1280 and key != "step":
            shot(page, f"long-run-x-{key}")
    page.context.close()
    assert page.js_errors == [], page.js_errors


def test_every_format_but_a_thinned_one_is_streamed_row_for_row(make_app, imported_run, monkeypatch):
    """A million-row import read as JSON or CSV is never held in memory: pages of rows (a page is 3 rows here);
    a history of one page is answered at once (a content length, no streaming)."""
    from app.services import metric_history

    monkeypatch.setattr(metric_history, "PAGE_ROWS", 3)
    client = make_app()
    run = imported_run(client)
    whole = client.get(f"/api/runs/{run}/metrics", params={"format": "columns"}).json()
    assert whole["rows"] == 11 and whole["downsampled"] is False
    rows = whole["columns"]
    as_json = client.get(f"/api/runs/{run}/metrics")
    assert "content-length" not in as_json.headers and as_json.headers["content-type"] == "application/json"
    listed = as_json.json()
    assert [r["step"] for r in listed] == rows["step"] == list(range(11))
    assert [r["val_loss"] for r in listed] == rows["val_loss"] == [None] * 10 + [4.5]
    assert listed[3] == {"step": 3, "train_loss": 4.7, "val_loss": None, "lr": 0.001, "tokens_per_sec": 1000.0,
                         "tokens_seen": 300, "elapsed_sec": 0.3, "epochs": 0.0, "peak_mem_mib": 100.0,
                         "val_loss_full": None}
    assert "content-length" not in client.get(f"/api/runs/{run}/metrics", params={"format": "csv"}).headers
    as_csv = client.get(f"/api/runs/{run}/metrics", params={"format": "csv", "from_step": 9})
    assert as_csv.headers["content-length"] == str(len(as_csv.content))
    assert as_csv.text.splitlines() == ["step,train_loss,val_loss,lr,tokens_per_sec,elapsed_sec,tokens_seen,epochs,"
                                        "peak_mem_mib,val_loss_full", "9,4.1,,0.001,1000.0,0.9,900,0.0,100.0,",
                                        "10,4.0,4.5,0.001,1000.0,1.0,1000,0.0,100.0,"]
    assert client.get("/api/runs/999/metrics", params={"format": "csv"}).status_code == 404


@pytest.mark.parametrize("value", [0.1, 1e-05, 3.0, 4.123456789012345, 1e300, -2.5, 7, 0, 2**40, None])
def test_a_page_of_numbers_is_written_as_json_writes_it(value):
    from app.services.metric_history import json_items

    assert json_items([value, {"v": value}]) == json.dumps([value, {"v": value}])[1:-1]


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_non_finite_number_in_a_page_is_null(value):
    from app.services.metric_history import json_items

    assert json_items([1.5, value, {"step": 3, "val_loss": value}]) == '1.5, null, {"step": 3, "val_loss": null}'
