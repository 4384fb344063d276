"""The run list in Chromium with what a real database holds: 10,000 runs, long names, a running
run's progress, a failed run's error, runs from several workers. No two cells' text may overlap at
desktop (1,400 px) or phone (390 px) width, the page shows one page of runs and a count, and the
worker filter and column say where each run ran."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import insert

from .browser import needs_chromium, open_page, shot
from .service_helpers import AppServer, Home

pytestmark = needs_chromium
RUNS = 10_000
LONG_NAME = "holmes-lr-sweep-with-a-very-long-descriptive-name-that-goes-on-and-on-0123456789-abcdefghijklmnop"
ERROR = ("out of memory on cpu at batch_size 4096: DefaultCPUAllocator: can't allocate memory: you tried to "
         "allocate 68719476736 bytes. Error code 12 (Cannot allocate memory) (try a smaller batch_size, or "
         "gradient accumulation)")

# Every cell's text box (the union of its text's client rects, which spill out of a cell that is too
# narrow), then every pair of boxes of different cells that intersect.
OVERLAPS_JS = """() => {
  const boxes = [];
  for (const cell of document.querySelectorAll('table.runs td, table.runs th')) {
    const range = document.createRange();
    range.selectNodeContents(cell);
    for (const r of range.getClientRects()) {
      if (r.width > 0.5 && r.height > 0.5) boxes.push({cell, text: cell.innerText.trim().slice(0, 30), r});
    }
  }
  const hits = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i], b = boxes[j];
    if (a.cell === b.cell || a.cell.contains(b.cell) || b.cell.contains(a.cell)) continue;
    const x = Math.min(a.r.right, b.r.right) - Math.max(a.r.left, b.r.left);
    const y = Math.min(a.r.bottom, b.r.bottom) - Math.max(a.r.top, b.r.top);
    if (x > 1 && y > 1) hits.push(`${a.text} | ${b.text}`);
  }
  return hits.slice(0, 10);
}"""


def target_fields(i: int) -> dict:
    """Every run has a target of 4.6; a third reach it, run 3 fastest (61 s), then 9, 15, ... (2 s more each)."""
    reached = i % 3 == 0 and i > 0
    return {"target_val_loss": 4.6, "target_step": 300 if reached else None, "target_tokens": 300 * 2048 if reached
            else None, "target_sec": 60.0 + i / 3 if reached else None, "target_exact": True if reached else None}


def fill_database(home: Home) -> None:
    """10,000 finished runs, then the ones a person looks at first: long names, running, failed, from two workers."""
    from app.db import init_db, session_scope
    from app.models import Run, utcnow
    from app.settings import Settings

    settings = Settings(home=home.path)
    init_db(settings)
    config = {"preset": "tiny", "steps": 400, "precision": "fp32", "batch_size": 16}
    now = utcnow()
    rows = [dict(name=f"run {i}", kind="train", status="succeeded", config=config, requested_device="cpu",
                 device="cpu", precision="fp32", attempt=1, cancel_requested=False, created_at=now, last_step=400,
                 best_val_loss=4.5 + (i % 100) / 100, tags=[], notes="", worker="lab-pc:4242", worker_host="lab-pc",
                 **target_fields(i))
            for i in range(RUNS - 4)]
    with session_scope(settings) as s:
        s.execute(insert(Run), rows)
        s.add_all([
            Run(name=LONG_NAME, config=config, status="succeeded", requested_device="cpu", device="cpu", last_step=400,
                best_val_loss=4.1234, tags=["sweep", "lr"], worker="lab-pc:4242", worker_host="lab-pc", created_at=now),
            Run(name="failed " + LONG_NAME, config=config, status="failed", requested_device="cpu", device="cpu",
                last_step=37, error=ERROR, worker="gpu-box:77", worker_host="gpu-box", created_at=now),
            Run(name="queued run", config=config, status="queued", requested_device="auto", created_at=now),
            Run(name="a running run", config=config, status="running", requested_device="cuda", device="cuda:0",
                last_step=220, best_val_loss=3.9876, worker="gpu-box:77", worker_host="gpu-box", created_at=now),
        ])


@pytest.fixture(scope="module")
def crowded(tmp_path_factory, slice_path):
    home = Home(tmp_path_factory.mktemp("run-list") / "home", slice_path)
    home.path.mkdir()
    fill_database(home)
    app = AppServer(home)
    yield app
    app.stop()


@pytest.mark.parametrize("width", [1400, 390])
def test_no_cell_overlaps_another(crowded, browser, width):
    page = open_page(browser, viewport={"width": width, "height": 900})
    page.goto(f"{crowded.url}/")
    rows = page.locator("table.runs tbody tr")
    assert rows.count() == 50  # one page, not 10,000 rows
    assert page.inner_text("#runs-count") == "runs 1–50 of 10,000"
    running = page.locator("tr", has_text="a running run")
    assert "220 / 400" in running.inner_text()
    failed = page.locator("tr", has_text="failed " + LONG_NAME)
    assert "out of memory on cpu at batch_size 4096" in failed.inner_text()
    assert page.evaluate(OVERLAPS_JS) == []
    shot(page, f"run-list-{width}")
    assert page.js_errors == []
    page.context.close()


def test_sorts_by_time_to_target_and_pages_in_that_order(crowded, browser):
    page = open_page(browser, viewport={"width": 1400, "height": 900})
    page.goto(f"{crowded.url}/")
    page.click("th a[data-sort=time_to_target]")
    page.wait_for_function("document.querySelector('#runs-sort').value === 'time_to_target'")
    names = page.locator("table.runs tbody td.name a").all_inner_texts()
    assert names[:3] == ["run 3", "run 6", "run 9"]
    assert page.locator("table.runs tbody td.to-target").all_inner_texts()[:2] == ["1 min 1 s", "1 min 2 s"]
    assert page.get_attribute("th:has(a[data-sort=time_to_target])", "aria-sort") == "ascending"
    shot(page, "run-list-by-time-to-target")
    page.click("text=Older runs")  # the next page keeps the order, and so does a live refresh of it
    page.wait_for_function("document.querySelector('#runs-count').textContent.startsWith('runs 51–100')")
    assert page.locator("table.runs tbody td.name a").first.inner_text() == "run 153"
    page.evaluate("htmx.trigger('#runs-table', 'refresh')")
    page.wait_for_timeout(500)
    assert page.locator("table.runs tbody td.name a").first.inner_text() == "run 153"
    page.fill("input[name=worker]", "lab-pc")  # and so does a filter
    page.press("input[name=worker]", "Enter")
    page.wait_for_function("document.querySelector('#runs-count').textContent === 'runs 1–50 of 9,997'")
    assert page.locator("table.runs tbody td.name a").first.inner_text() == "run 3"
    page.fill("input[name=worker]", "")
    page.press("input[name=worker]", "Enter")
    page.wait_for_function("document.querySelector('#runs-count').textContent === 'runs 1–50 of 10,000'")
    page.click("th a[data-sort=newest]")
    page.wait_for_function("document.querySelector('#runs-sort').value === 'newest'")
    cells = page.locator("table.runs tbody td.to-target").all_inner_texts()
    # the four runs without a target, then runs 9995 and 9994 (finished, never reached) and 9993 (3,391 s)
    assert cells[:7] == ["–"] * 4 + ["not reached"] * 2 + ["56 min 31 s"]
    assert page.js_errors == []
    page.context.close()


def test_pages_through_the_list_and_filters_by_worker(crowded, browser):
    page = open_page(browser, viewport={"width": 1400, "height": 900})
    page.goto(f"{crowded.url}/")
    page.click("text=Older runs")
    page.wait_for_function("document.querySelector('#runs-count').textContent.startsWith('runs 51–100')")
    assert page.locator("table.runs tbody td.name").first.inner_text().startswith("run 9949 #9950")
    page.fill("input[name=worker]", "gpu-box")
    page.press("input[name=worker]", "Enter")
    page.wait_for_function("document.querySelector('#runs-count').textContent === 'runs 1–2 of 2'")
    names = page.locator("table.runs tbody td.name a").all_inner_texts()
    assert names == ["a running run", "failed " + LONG_NAME]
    assert page.locator("table.runs tbody td.worker").all_inner_texts() == ["gpu-box:77", "gpu-box:77"]
    page.context.close()


def test_the_api_names_the_worker_and_filters_by_it(crowded):
    page = httpx.get(f"{crowded.url}/api/runs", params={"worker": "gpu-box"}, timeout=30).json()
    assert page["total"] == 2
    assert [r["worker"] for r in page["items"]] == [{"name": "gpu-box:77", "host": "gpu-box"}] * 2
    assert "pid" not in page["items"][0] and "cancel_requested" not in page["items"][0]
    queued = httpx.get(f"{crowded.url}/api/runs", params={"status": "queued"}, timeout=30).json()["items"][0]
    assert queued["worker"] is None
