"""The sweep pages in Chromium against the real app and two real workers: the form starts a sweep, the
trials table and the overlaid curves fill as trials run, the parallel coordinates and importance charts
are drawn, and "Run the best settings" starts a run from the best trial's options."""

from __future__ import annotations

import pytest

from .browser import needs_chromium, shot

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def site(start_service):
    return start_service("sweep-pages", workers=("p1", "p2")).app


def chart_points(page, element_id: str) -> int:
    return page.evaluate(f"echarts.getInstanceByDom(document.getElementById('{element_id}'))"
                         ".getOption().series[0].data.length")


@pytest.mark.slow  # 75 s on 2 cores: a 4-trial sweep watched to its end
def test_a_sweep_from_the_form_fills_its_page_live(site, page):
    page.goto(f"{site.url}/sweeps")
    assert page.inner_text("#sweeps-table") .count("No sweeps yet.") == 1
    page.select_option("select[name=preset]", "tiny")
    for name, value in {"steps": "20", "eval_every": "5", "batch_size": "4", "seed": "9", "run_cap": "4",
                        "parallel": "2", "name": "lr and dropout", "p0_min": "0.002", "p0_max": "0.02"}.items():
        page.fill(f"input[name={name}]", value)
    page.select_option("select[name=device]", "cpu")
    page.select_option("select[name=early_terminate]", "")  # no pruning: 4 completed trials give an importance
    page.click("#sweep-form button[type=submit]")
    page.wait_for_url("**/sweeps/*")
    assert page.locator("#importance").is_hidden()  # no empty chart before 4 trials have completed
    # live: the table and the curves fill while trials run
    page.wait_for_function("document.querySelectorAll('#trials-table tbody tr[data-run]').length >= 2", timeout=60_000)
    # the table moves with the stream: before any trial is done, a running one shows its best validation loss
    page.wait_for_function("document.querySelector('#sweep-progress').textContent.includes('0 of 4 trials done') "
                           "&& [...document.querySelectorAll('#trials-table tbody tr[data-run]')].some(r => "
                           "r.querySelector('.status-running') && r.querySelector('td.best-val').dataset.value !== '')",
                           timeout=60_000)
    page.wait_for_function("document.querySelector('#curves canvas') !== null", timeout=120_000)
    page.wait_for_function("document.getElementById('sweep-status').textContent === 'finished'", timeout=300_000)
    page.wait_for_function("document.querySelectorAll('#trials-table tbody tr[data-run]').length === 4")
    page.wait_for_function("document.querySelector('#sweep-progress').textContent.includes('4 of 4 trials done')")
    assert page.locator("#trials-table .status-succeeded").count() == 4
    page.wait_for_function("echarts.getInstanceByDom(document.getElementById('parallel'))"
                           ".getOption().series[0].data.length === 4")
    page.wait_for_function("echarts.getInstanceByDom(document.getElementById('importance'))"
                           ".getOption().series[0].data.length === 2")
    assert page.locator("#importance").is_visible() and page.locator("#importance canvas").bounding_box()["width"] > 300
    axes = page.evaluate("echarts.getInstanceByDom(document.getElementById('parallel')).getOption()"
                         ".parallelAxis.map(a => a.name)")
    assert axes == ["lr", "dropout", "best val"]
    series = page.evaluate("document.querySelectorAll('#curves .u-legend .u-series').length")
    assert series == 5  # the step axis and 4 trials
    # sorting by best val puts the best trial first
    page.click("#trials-table th:has-text('best val')")
    first = page.locator("#trials-table tbody tr").first
    assert "best" in (first.get_attribute("class") or "")
    shot(page, "sweep-finished")
    # run the best settings: the new-run form prefilled from the best trial
    assert page.locator("#cancel-sweep").count() == 0  # gone once the sweep has ended
    assert page.evaluate("document.querySelectorAll('#curves .u-legend .u-series').length") == 5
    page.click("#run-best")
    page.wait_for_url("**/new?from=*")
    best = page.evaluate("fetch('/api/sweeps/1').then(r => r.json())")
    assert float(page.input_value("input[name=lr]")) == pytest.approx(best["best"]["params"]["lr"])
    page.fill("input[name=steps]", "10")
    page.click("button[type=submit]")
    page.wait_for_url("**/runs/*")


def test_a_bad_yaml_config_is_refused_in_the_form(site, page):
    page.goto(f"{site.url}/sweeps")
    if page.locator("details.card[open]").count() == 0:  # folded once a sweep exists
        page.click("summary:has-text('New sweep')")
    page.click("text=…or a W&B sweep config")
    page.fill("textarea[name=yaml]", "method: grid\nparameters:\n  learning_rate: {values: [0.1]}\n")
    page.click("#sweep-form button[type=submit]")
    page.wait_for_selector("#sweep-error")
    assert page.inner_text("#sweep-error") == ("parameters.learning_rate: 'learning_rate' is not a run option "
                                               "(did you mean 'lr'? GET /api/options lists them)")
    shot(page, "sweep-form-error")


def test_a_sweep_over_seeds_shows_each_trials_seeds_and_their_mean(site, page):
    """Two real workers train a trial's two seeds; the page counts the trial once and shows its mean."""
    config = {"method": "random", "run_cap": 1, "parallel": 1, "seeds": 2, "name": "over seeds",
              "parameters": {"lr": {"distribution": "q_log_uniform_values", "min": 0.001, "max": 0.01, "q": 0.001}},
              "base": {"preset": "tiny", "device": "cpu", "steps": 4, "eval_every": 2, "batch_size": 2, "seed": 5}}
    created = site.client().post("/api/sweeps", json=config)
    assert created.status_code == 201, created.text
    sweep_id = created.json()["id"]
    page.goto(f"{site.url}/sweeps/{sweep_id}")
    page.wait_for_function("document.getElementById('sweep-status').textContent === 'finished'", timeout=120_000)
    page.wait_for_function("document.querySelector('#sweep-progress').textContent.includes('1 of 1 trials done')")
    detail = site.client().get(f"/api/sweeps/{sweep_id}").json()
    rows = page.locator("#trials-table tbody tr[data-run]")
    assert [rows.nth(i).locator("td").first.inner_text() for i in range(2)] == ["0 · seed 5", "0 · seed 6"]
    mean = (detail["trials"][0]["best_val_loss"] + detail["trials"][1]["best_val_loss"]) / 2
    assert detail["best"]["objective"] == pytest.approx(mean)
    assert page.locator("#trials-table td.trial-mean").first.inner_text() == f"{mean:.4f}"
    assert "Each trial runs 2 seeds from 5 on" in page.inner_text("main")
    page.wait_for_function("document.querySelectorAll('#curves .u-legend .u-series').length === 3")
    labels = page.locator("#curves .u-legend .u-series .u-label")
    assert [labels.nth(i).inner_text() for i in (1, 2)] == ["trial 0 · seed 5", "trial 0 · seed 6"]
    shot(page, "sweep-over-seeds")
