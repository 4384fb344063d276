"""Pages everyone can use: axe-core finds no violation of any impact on each page of ours (a real app in
Chromium; every other browser test fails on a serious or critical one: tests/browser.py), the charts carry their
figures as text, and a run is started and its page opened with the keyboard alone."""

from __future__ import annotations

import re

import httpx
import pytest

from .browser import axe_of, needs_chromium, open_page, shot
from .conftest import IMPORTED_RUN

pytestmark = needs_chromium
TOKEN = "accessibility-test-token-0123456789"


@pytest.fixture(scope="module")
def site(start_service):  # noqa: ANN201
    """A real app (no worker: what is submitted stays queued) with a group of three imported seeds, a submitted
    group, a sweep and a benchmark."""
    app = start_service("a11y").app
    with httpx.Client(base_url=app.url, timeout=30) as c:
        runs = [c.post("/api/runs/import", json={**IMPORTED_RUN, "name": f"seed {s}",
                                                 "config": {**IMPORTED_RUN["config"], "seed": s}}).json()["id"]
                for s in (1, 2, 3)]
        for run in runs:
            assert c.patch(f"/api/runs/{run}", json={"group_id": "imported-seeds", "tags": ["a11y"]}).status_code == 200
        queued = c.post("/api/runs", json={"preset": "tiny", "device": "cpu", "steps": 5, "seeds": 2}).json()
        sweep = c.post("/api/sweeps", json={"method": "grid", "parameters": {"lr": {"values": [0.01]}},
                                            "base": {"preset": "tiny", "device": "cpu", "steps": 2}}).json()["id"]
        bench = c.post("/api/benchmarks", json={"preset": "tiny", "device": "cpu", "batch_sizes": [2],
                                                "precisions": ["fp32"], "steps": 1, "warmup": 0}).json()["run"]["id"]
    return app, runs, queued, sweep, bench


def pages_of(runs: list[int], queued: list[dict], sweep: int, bench: int) -> list[str]:
    ids = ",".join(map(str, runs))
    return ["/", f"/runs/{runs[0]}", f"/runs/{queued[0]['id']}", f"/compare?ids={ids}&group_by=group",
            f"/compare?ids={ids}", "/compare", "/new", "/sweeps", f"/sweeps/{sweep}", "/benchmarks",
            f"/benchmarks/{bench}", "/import", "/no-such-page", "/runs/999999"]


def test_no_page_of_ours_has_an_accessibility_violation(site, browser):
    app, runs, queued, sweep, bench = site
    page = open_page(browser)
    found = {}
    for path in pages_of(runs, queued, sweep, bench):
        page.axe_results.clear()
        page.goto(app.url + path)
        found[path] = [f"{v['impact']} {v['id']}: {v['help']} ({', '.join(v['nodes'])})"
                       for v in axe_of(page, path)]
    violations = {path: v for path, v in found.items() if v}
    assert violations == {}, "\n".join(f"{path}: {v}" for path, vs in violations.items() for v in vs)
    assert [e for e in page.js_errors if "status of 404" not in e] == []  # the two pages that are not there
    page.context.close()


def test_the_login_page_has_none_either(start_service, browser):
    app = start_service("a11y-login", TINYGPT_API_TOKEN=TOKEN).app
    page = open_page(browser)
    page.goto(f"{app.url}/login")
    assert axe_of(page, "/login") == []
    page.fill("input[name=token]", "a-wrong-token-000000")
    page.axe_results.clear()
    page.keyboard.press("Enter")
    page.wait_for_selector("#token-error")
    assert axe_of(page, "/login") == []
    page.context.close()


def test_charts_carry_their_figures_as_text(site, browser):
    app, runs, queued, sweep, bench = site
    page = open_page(browser)
    page.goto(f"{app.url}/runs/{runs[0]}")
    page.wait_for_function("document.getElementById('loss-chart').getAttribute('aria-label')")
    assert page.get_attribute("#loss-chart", "role") == "img"
    assert page.get_attribute("#loss-chart", "aria-label") == (
        "Loss by step: 11 training rows (steps 0 to 10), train loss 5.0000 at step 0 to 4.0000 at step 10; "
        "validation loss 4.5000 at step 10 (best 4.5000 at step 10)")
    assert page.get_attribute("#tps-chart", "aria-label") == \
        "tokens/s by step: 11 rows (steps 0 to 10), from 1,000 to 1,000 (lowest 1,000, highest 1,000)"
    page.goto(f"{app.url}/compare?ids={','.join(map(str, runs))}&group_by=group")
    label = page.get_attribute("#compare-chart", "aria-label")
    assert label == "Validation loss by step: imported-seeds: mean 4.5000 at step 10 (1 shared evaluation step)"
    assert page.js_errors == []
    page.context.close()


def test_a_run_is_started_and_its_page_opened_with_the_keyboard_alone(site, browser):
    app, *_ = site
    page = open_page(browser)
    page.goto(f"{app.url}/new")

    def tab_to(selector: str, most: int = 300) -> None:
        for _ in range(most):
            page.keyboard.press("Tab")
            if page.evaluate(f"document.activeElement.matches({selector!r})"):
                return
        raise AssertionError(f"{selector} is not reachable with Tab")

    tab_to("select[name=device]")
    page.keyboard.press("End")  # the select's last choice ... then back to the CPU, by typing its name
    page.keyboard.type("cpu")
    assert page.input_value("select[name=device]") == "cpu"
    tab_to("input[name=steps]")
    page.keyboard.press("Control+A")
    page.keyboard.type("7")
    tab_to("#new-form button[type=submit]")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r".*/runs/\d+$"))
    run_id = int(page.url.rsplit("/", 1)[1])
    run = httpx.get(f"{app.url}/api/runs/{run_id}", timeout=30).json()
    assert (run["status"], run["config"]["steps"], run["requested_device"]) == ("queued", 7, "cpu")
    tab_to("#cancel-btn")
    page.keyboard.press("Enter")
    page.wait_for_function("document.getElementById('run-status').textContent === 'cancelled'")
    page.goto(f"{app.url}/")
    tab_to(f"a[href$='/runs/{run_id}']")
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/runs/{run_id}")
    shot(page, "keyboard-run-page")
    assert page.js_errors == []
    page.context.close()
