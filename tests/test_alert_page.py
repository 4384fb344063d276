"""The run page tells what went wrong, in Chromium against the real app and worker: the stalled banner
comes and goes with a job stopped by SIGSTOP (and the page raises a desktop notification for it), the
early-stop banner and the run list's line show why a run ended before its last step."""

from __future__ import annotations

import os
import signal
import sqlite3

import pytest

from .browser import needs_chromium, open_page, shot
from .service_helpers import read_events, wait_for

pytestmark = needs_chromium

BASE = {"preset": "tiny", "device": "cpu", "precision": "fp32", "batch_size": 4, "threads": 1, "eval_batches": 2,
        "sample_tokens": 0}
# Notifications shown by the page, as the browser was asked for them (headless Chromium draws none)
RECORD_NOTIFICATIONS = """
window.shownNotifications = [];
const RealNotification = window.Notification;
window.Notification = class extends RealNotification {
  constructor(title, options) { super(title, options); window.shownNotifications.push([title, options.body]); }
};
"""


@pytest.fixture(scope="module")
def site(start_service):
    service = start_service("alert-pages", workers=("pages",), TINYGPT_STALL_AFTER_SEC="3")
    return service.home, service.app


@pytest.mark.slow  # 40 s on 2 cores: a stall watched on the page, then an early-stopped run
def test_the_run_page_shows_a_stall_and_an_early_stop(site, browser):
    home, app = site
    page = open_page(browser, permissions=["notifications"])
    page.add_init_script(RECORD_NOTIFICATIONS)
    with app.client() as c:
        run_id = c.post("/api/runs", json={**BASE, "steps": 100_000, "eval_every": 50_000, "name": "stalls"}).json()[0]["id"]
        page.goto(f"{app.url}/runs/{run_id}")
        page.wait_for_function("+document.getElementById('progress').value >= 20", timeout=60_000)
        assert page.is_hidden("#stall-banner") and page.is_hidden("#notify-btn")  # permission already granted
        with sqlite3.connect(home.path / "tinygpt.db") as db:
            pid = db.execute("select pid from runs where id = ?", (run_id,)).fetchone()[0]
        os.kill(pid, signal.SIGSTOP)
        try:
            page.wait_for_selector("#stall-banner", state="visible", timeout=15_000)
            banner = page.inner_text("#stall-banner")
            assert banner.startswith("Stalled: no step for ") and banner.endswith("its job is alive.")
            page.wait_for_function("window.shownNotifications.length === 1")
            title, body = page.evaluate("window.shownNotifications[0]")
            assert title == "stalls: stalled" and body.startswith("no step for ")
            shot(page, "run-stalled")
        finally:
            os.kill(pid, signal.SIGCONT)
        page.wait_for_selector("#stall-banner", state="hidden", timeout=15_000)
        c.post(f"/api/runs/{run_id}/cancel")
        read_events(f"{app.url}/api/runs/{run_id}/events", timeout=60)

        stopped = c.post("/api/runs", json={**BASE, "steps": 40, "eval_every": 5, "lr": 1e-7, "early_stop_patience": 2,
                                            "early_stop_min_delta": 0.01, "name": "patience"}).json()[0]["id"]
        page.goto(f"{app.url}/runs/{stopped}")
        page.wait_for_selector("#stop-banner", state="visible", timeout=60_000)  # live, from the status event
        reason = wait_for(lambda: c.get(f"/api/runs/{stopped}").json()["stop_reason"], message="stop reason")
    assert page.inner_text("#stop-banner") == reason
    assert reason.startswith("stopped early at step 10: validation loss has not improved by 0.01 for 2 evaluations")
    assert page.inner_text("#run-status") == "succeeded" and page.inner_text("#progress-text") == "10 / 40"
    shot(page, "run-stopped-early")
    page.reload()  # and as the server renders it
    assert page.inner_text("#stop-banner") == reason and page.is_hidden("#stall-banner")
    page.goto(f"{app.url}/")
    assert page.inner_text(f"#run-{stopped} .note-line") == reason
    shot(page, "run-list-stop-reason")
    page.context.close()
    assert page.js_errors == [], page.js_errors
