"""The pages in a real browser: Playwright driving Debian's Chromium against the real app and worker."""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tinygpt.device import cpu_has_bf16, cpu_name
from tinygpt.presets import model_size
from tinygpt.run_config import TrainConfig

from .browser import fill_run_form, needs_chromium, shot
from .service_helpers import TINY, AppServer, Home, Worker, read_events, wait_for

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def site(start_service):
    return start_service("pages", workers=("pages",), TINYGPT_WARM_JOBS="true").app  # each next run starts at once


def test_create_run_from_form_and_watch_it_finish(site, page):
    page.goto(f"{site.url}/new")
    page.select_option("select[name=preset]", "holmes")
    assert page.input_value("input[name=steps]") == "1500" and page.input_value("input[name=eval_every]") == "250"
    page.select_option("select[name=preset]", "tiny")  # the preset fills its suggested fields
    assert page.input_value("input[name=steps]") == "300" and page.input_value("input[name=batch_size]") == "16"
    page.wait_for_function("document.querySelector('#preset-info').textContent.includes('475,712 parameters')")
    fill_run_form(page, steps=30, batch_size=4, eval_every=10, seed=7, name="<script>alert(1)</script>")
    assert "training tokens" in page.inner_text("#estimate")
    page.click("button[type=submit]")
    page.wait_for_url("**/runs/*")
    # the chart receives points as they are pushed, then the run finishes
    page.wait_for_function("window.runState && window.runState.rows.length >= 2", timeout=120_000)
    page.wait_for_function("document.getElementById('run-status').textContent === 'succeeded'", timeout=120_000)
    page.wait_for_function("window.runState.rows.length === 4")
    steps = page.evaluate("window.runState.rows.map(r => r.step)")
    assert steps == [0, 10, 20, 30]
    assert page.inner_text("#run-name") == "<script>alert(1)</script>"  # shown as text, not run
    assert page.inner_text("#progress-text") == "30 / 30"
    assert page.locator("#samples li").count() == 4
    assert page.locator("#loss-chart canvas").count() == 1
    shot(page, "run-finished")


def test_validation_errors_show_next_to_fields(site, page):
    page.goto(f"{site.url}/new")
    page.fill("input[name=steps]", "0")
    page.fill("input[name=lr]", "5")
    page.click("button[type=submit]")
    page.wait_for_selector("#error-steps")
    assert page.inner_text("#error-steps") == "steps must be in [1, 10000000], got 0"  # the library's words
    assert page.inner_text("#error-lr") == "lr must be in (0, 1], got 5.0"
    assert page.url.endswith("/new")
    shot(page, "new-run-errors")


@pytest.mark.parametrize("field, value, why", [
    ("steps", "-3", "Value must be greater than or equal to 1."),
    ("steps", "", "a number is needed"),
    ("batch_size", "5000", "Value must be less than or equal to 4096."),
    ("grad_accum", "1.5", "Please enter a valid value. The two nearest valid values are 1 and 2."),
])
def test_estimate_only_for_values_that_would_be_accepted(site, page, field, value, why):
    page.goto(f"{site.url}/new")
    assert page.inner_text("#estimate").startswith("About 614,400 training tokens")  # tiny: 300 x 16 x 128
    label = {"steps": "steps", "batch_size": "batch size", "grad_accum": "grad accum"}[field]
    if field == "grad_accum":
        page.click("#group-optimisation details.advanced summary")  # an advanced option: folded away
    page.fill(f"input[name={field}]", value)
    assert page.inner_text("#estimate") == f"No estimate until {label} is valid ({why})."
    page.fill(f"input[name={field}]", "2")
    assert page.inner_text("#estimate").startswith("About ")


def test_run_page_config_says_what_options_mean_and_what_auto_resolved_to(site, page):
    run = httpx.post(f"{site.url}/api/runs", json={"preset": "tiny", "device": "auto", "precision": "auto",
                                                   "steps": 2, "batch_size": 2, "eval_every": 2}, timeout=30).json()[0]
    wait_for(lambda: httpx.get(f"{site.url}/api/runs/{run['id']}", timeout=30).json()["status"] == "succeeded",
             timeout=120, message="the run to succeed")
    page.goto(f"{site.url}/runs/{run['id']}")
    rows = dict(zip(page.locator("#config th").all_inner_texts(), page.locator("#config td").all_inner_texts(),
                    strict=True))
    done = httpx.get(f"{site.url}/api/runs/{run['id']}", timeout=30).json()
    threads = done["device_info"]["threads"]  # the job's own count (this test process's may have been changed)
    assert isinstance(threads, int) and threads >= 1
    assert rows["arch"] == "preset default (modern)"
    assert rows["threads"] == f"PyTorch default ({threads} threads)"
    assert rows["compile"] == "off" and rows["grad_checkpointing"] == "off" and rows["resume"] == "on"
    # what the job resolved (on the CPU a rule from its flags: bf16 with bf16 units, else fp32)
    assert done["precision"] in ("bf16", "fp32") and rows["precision"] == f"auto → {done['precision']}"
    assert cpu_has_bf16() or done["precision"] == "fp32"  # without bf16 units: never bf16
    assert rows["device"] == "auto → cpu"
    assert "None" not in rows.values() and "True" not in rows.values() and "False" not in rows.values()
    assert done["worker"] == {"name": "pages", "host": socket.gethostname()}
    assert page.inner_text("#worker-desc") == f"worker pages on {socket.gethostname()}"
    shot(page, "run-config")


def test_model_size_options_show_parameters_and_memory_live(site, page):
    page.goto(f"{site.url}/new")
    page.click("#group-model details.advanced summary")
    page.fill("input[name=d_model]", "96")
    page.fill("input[name=n_heads]", "6")
    expected = model_size(TrainConfig(preset="tiny", d_model=96, n_heads=6).model_config(), 16)
    page.wait_for_function(f"document.querySelector('#preset-info').textContent.includes('{expected['params']:,} parameters')")
    assert f"about {round(expected['memory_mib']):,} MiB to train" in page.inner_text("#preset-info")
    page.fill("input[name=n_heads]", "7")
    page.wait_for_function("document.querySelector('#preset-info').textContent.includes('must be divisible')")
    assert "d_model (96) must be divisible by n_heads (7)" in page.inner_text("#preset-info")
    page.js_errors[:] = [e for e in page.js_errors if "status of 422" not in e]
    page.fill("input[name=n_heads]", "6")
    page.check("input[name=untied_head]")  # a checkbox that shapes the model: the head's 4,096 x 96 more
    untied = model_size(TrainConfig(preset="tiny", d_model=96, n_heads=6, untied_head=True).model_config(), 16)
    assert untied["params"] == expected["params"] + 4096 * 96
    page.wait_for_function(f"document.querySelector('#preset-info').textContent.includes('{untied['params']:,} parameters')")


def form_values(page, names) -> dict:  # noqa: ANN001
    """What the new-run form shows for these options (a checkbox: whether it is ticked; a number as a number)."""
    return {name: as_number(value) for name, value in page.evaluate("""(names) => Object.fromEntries(names.map(
      (name) => {
        const input = document.querySelector(`#new-form [name=${name}]`);
        return [name, input.type === "checkbox" ? input.checked : input.value];
      }))""", names).items()}


def as_number(value: object) -> object:
    try:
        return float(value) if isinstance(value, str) else value
    except ValueError:
        return value


def test_choosing_a_recipe_fills_its_options_and_the_series_undoes_them(site, page):
    from tinygpt.device import cpu_has_bf16, cpu_name
    from tinygpt.recipes import RECIPES, guide, with_recipe

    fast = RECIPES["fast"].options
    page.goto(f"{site.url}/new")
    before = form_values(page, list(fast))
    assert page.text_content("#recipe-info") == guide("series", "cpu", cpu_name(), cpu_has_bf16())
    page.select_option("select[name=recipe]", "fast")
    assert form_values(page, list(fast)) == fast
    assert page.text_content("#recipe-info") == guide("fast", "cpu", cpu_name(), cpu_has_bf16())
    params = model_size(TrainConfig(**with_recipe({"recipe": "fast"})).model_config(), fast["batch_size"])["params"]
    page.wait_for_function(f"document.querySelector('#preset-info').textContent.includes('{params:,} parameters')")
    shot(page, "new-run-fast-recipe")
    page.select_option("select[name=recipe]", "series")
    assert form_values(page, list(fast)) == before and before != fast


def test_sample_box_streams_text(site, page):
    import httpx

    run = httpx.post(f"{site.url}/api/runs", json={**TINY, "steps": 10, "eval_every": 10}).json()[0]
    read_events(f"{site.url}/api/runs/{run['id']}/events")
    page.goto(f"{site.url}/runs/{run['id']}")
    page.fill("#sample-form textarea[name=prompt]", "Holmes")
    page.fill("#sample-form input[name=max_tokens]", "30")
    page.fill("#sample-form input[name=seed]", "3")
    page.click("#sample-btn")
    page.wait_for_function("document.getElementById('sample-output').textContent.length > 'Holmes'.length")
    page.wait_for_function("!document.getElementById('sample-btn').disabled")
    text = page.inner_text("#sample-output")
    assert text.startswith("Holmes") and len(text) > len("Holmes")
    page.fill("#neighbours-form input[name=word]", " the")
    page.click("#neighbours-form button")
    page.wait_for_selector("#neighbours li")
    assert page.locator("#neighbours li").count() == 10
    shot(page, "sample-box")


def test_compare_page_for_two_runs(site, page):
    import httpx

    pair = httpx.post(f"{site.url}/api/runs", json={**TINY, "steps": 5, "eval_every": 5, "device": ["cpu", "auto"]}).json()
    for r in pair:
        read_events(f"{site.url}/api/runs/{r['id']}/events")
    page.goto(f"{site.url}/")
    for r in pair:
        page.check(f"input[name=ids][value='{r['id']}']")
    page.click("#compare-btn")
    page.wait_for_url("**/compare?*")
    assert page.locator("table.compare thead th").count() == 2
    assert "Largest gap between the curves" in page.inner_text("#curve-gap")
    assert page.locator("#compare-chart canvas").count() == 1
    assert "device" in page.inner_text("table.config")
    # where each ran: the worker (HOST:PID by default) and the device's name
    workers = [httpx.get(f"{site.url}/api/runs/{r['id']}").json()["worker"] for r in pair]
    worker_row = page.locator("table.compare tr", has=page.locator("th", has_text="trained by")).locator("td")
    assert worker_row.all_inner_texts() == [f"worker {w['name']} on {w['host']}" for w in workers]
    assert cpu_name() in page.locator("table.compare tr", has=page.locator("th", has_text="device")).inner_text()
    shot(page, "compare")


def imported_to_target(url: str, name: str, seconds_per_step: float) -> int:
    """An imported run whose whole-split validation loss first reaches its target 4.0 at step 30."""
    rows = [{"step": s, "train_loss": 4.6 - s / 100, "val_loss": 4.5 - s / 60, "lr": 1e-3, "tokens_per_sec": 1000.0,
             "elapsed_sec": s * seconds_per_step, "tokens_seen": s * 8192, "epochs": 0.1, "peak_mem_mib": 100.0,
             "val_loss_full": None if s < 20 else 4.5 - s / 60 - 0.01} for s in range(0, 50, 10)]
    body = {"name": name, "device": "cpu", "config": {"preset": "tiny", "steps": 40, "target_val_loss": 4.0},
            "metrics": rows}
    return httpx.post(f"{url}/api/runs/import", json=body).json()["id"]


def test_time_to_target_on_the_run_and_compare_pages(site, page):
    slow = imported_to_target(site.url, "target slow", 3.0)
    fast = imported_to_target(site.url, "target fast", 1.0)
    page.goto(f"{site.url}/runs/{fast}")
    assert page.inner_text("#target-line") == "reached 4 at step 30, 0.2M tokens, 30 s"
    page.wait_for_function("window.runState && window.runState.loaded")
    # the marker: one point of the "reached target" series, at step 30 on the validation curve; the target's line
    drawn = page.evaluate("""() => { const d = runState.charts.loss.data;
        return {marker: d[0].flatMap((x, i) => d[6][i] != null ? [[x, d[6][i]]] : []),
                target: [...new Set(d[5])]}; }""")
    assert drawn == {"marker": [[30, 4.0]], "target": [4.0]}
    shot(page, "run-time-to-target")
    page.goto(f"{site.url}/compare?ids={slow},{fast}")
    row = page.locator("table.compare tr", has=page.locator("th", has_text="time-to-target speed-up")).locator("td")
    assert row.all_inner_texts() == ["1.00x", "3.00x"]
    times = page.locator("table.compare tr", has=page.locator("th", has_text="time to target")).locator("td")
    assert times.all_inner_texts()[0] == "1 min 30 s (step 30, 4.0)"
    shot(page, "compare-time-to-target")


def test_runs_page_updates_live_and_works_at_phone_width(site, browser):
    import httpx

    context = browser.new_context(viewport={"width": 390, "height": 800})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{site.url}/")
    page.wait_for_timeout(800)
    run = httpx.post(f"{site.url}/api/runs", json={**TINY, "steps": 5, "eval_every": 5, "name": "live-row"}).json()[0]
    page.wait_for_selector(f"#run-{run['id']}", timeout=30_000)  # pushed, no reload
    wait_for(lambda: httpx.get(f"{site.url}/api/runs/{run['id']}").json()["status"] == "succeeded", timeout=120)
    page.wait_for_function(f"document.querySelector('#run-{run['id']} .status').textContent === 'succeeded'",
                           timeout=30_000)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 400  # the table scrolls inside itself; the page does not
    shot(page, "runs-phone")
    context.close()
    assert errors == []


def insert_long_run(home: Home, steps: int = 10_000, eval_every: int = 500) -> int:
    """A finished run with one metric per step whose validation turns up after step 4,000."""
    import math

    from sqlalchemy import insert

    from app.db import session_scope
    from app.models import Metric, Run, RunStatus
    from app.services.metric_blocks import rebuild_blocks
    from app.settings import Settings

    settings = Settings(home=home.path, holmes_path=home.corpus)
    with session_scope(settings) as s:
        run = Run(name="long", status=RunStatus.running, requested_device="cpu", device="cpu",
                  config={**TINY, "steps": steps, "eval_every": eval_every, "dataset": "holmes", "precision": "fp32"})
        s.add(run)
        s.flush()
        rows = []
        for step in range(steps + 1):
            train = 1.0 + 7.0 * math.exp(-step / 2500)
            val = None
            if step % eval_every == 0:
                val = 2.5 + abs(step - 4000) / 2000  # falls to its best at step 4,000, then climbs
            m = dict(step=step, train_loss=train, val_loss=val, lr=1e-3, tokens_per_sec=1000.0 + step % 7,
                     elapsed_sec=step * 0.1, tokens_seen=step * 512, epochs=step / 1000, peak_mem_mib=300.0)
            rows.append({"run_id": run.id, **m})
        s.execute(insert(Metric), rows)  # in bulk, as an import writes them (its events left the outbox long ago)
        rebuild_blocks(s, run_id=run.id)
        from app.services.lifecycle import change_status

        change_status(s, run, RunStatus.succeeded, settings=settings)
        return run.id


def test_ten_thousand_steps_render_downsampled_with_the_overfitting_banner(site, page):
    from .service_helpers import Home

    home = Home(Path(site.log_path).parent, Path())
    run_id = insert_long_run(home)
    page.goto(f"{site.url}/runs/{run_id}")
    page.wait_for_function("window.runState && window.runState.ended && "
                           "document.getElementById('progress-text').textContent === '10000 / 10000'", timeout=120_000)
    # the history came thinned by the server (two rows a pixel column, every evaluation), drawn downsampled
    assert page.evaluate("window.runState.downsampled") is True
    assert 1000 <= page.evaluate("window.runState.rows.length") <= 3000
    drawn = page.evaluate("window.runState.drawnPoints")
    assert 1000 <= drawn <= 2100
    banner = page.inner_text("#banner")
    assert banner.startswith("Overfitting since step 4500; best checkpoint is step 4000")
    # panning / zooming stays responsive: redraw with another axis and smoothing, timed in the page
    ms = page.evaluate("""() => { const t = performance.now();
        document.getElementById('smoothing').value = 0.9;
        document.getElementById('smoothing').dispatchEvent(new Event('input'));
        document.getElementById('x-axis').value = 'tokens_seen';
        document.getElementById('x-axis').dispatchEvent(new Event('change'));
        return performance.now() - t; }""")
    assert ms < 2000
    shot(page, "run-10k-overfitting")


def test_benchmark_from_the_page_fills_table_and_charts_live(site, page):
    page.goto(f"{site.url}/benchmarks")
    page.fill("input[name=batch_sizes]", "2, nope")
    page.click("button[type=submit]")
    page.wait_for_selector("#error-batch_sizes")
    assert "valid list" in page.inner_text("#error-batch_sizes") or "valid" in page.inner_text("#error-batch_sizes")
    page.select_option("select[name=preset]", "tiny")
    page.select_option("select[name=device]", "cpu")
    page.fill("input[name=batch_sizes]", "2, 4")
    page.fill("input[name=precisions]", "fp32")
    page.fill("input[name=threads]", "1, 2")
    page.fill("input[name=steps]", "1")
    page.fill("input[name=warmup]", "0")
    page.click("button[type=submit]")
    page.wait_for_url("**/benchmarks/*")
    page.wait_for_function("document.getElementById('run-status').textContent === 'succeeded'", timeout=120_000)
    page.wait_for_function("document.querySelectorAll('#cells-table tbody tr').length === 4", timeout=10_000)
    rows = [r.split("\t") for r in page.inner_text("#cells-table tbody").splitlines()]
    assert [r[:3] for r in rows] == [["fp32", "2", "1"], ["fp32", "4", "1"], ["fp32", "2", "2"], ["fp32", "4", "2"]]
    assert page.inner_text("#progress-text") == "4 / 4 cells"
    assert page.is_visible("#batch-chart .u-over") and page.is_visible("#threads-chart .u-over")
    legend = page.inner_text("#threads-chart")
    assert "fp32 batch 2" in legend and "fp32 batch 4" in legend
    shot(page, "benchmark")
    # the list shows it, and the new-run form now estimates the training time from it
    page.goto(f"{site.url}/benchmarks")
    assert "4 / 4" in page.inner_text("#benchmarks-table")
    page.goto(f"{site.url}/new")
    page.select_option("select[name=preset]", "tiny")
    page.select_option("select[name=device]", "cpu")
    page.fill("input[name=batch_size]", "4")
    estimate = page.inner_text("#estimate")
    assert "of training on cpu (benchmark #" in estimate and "at batch 4, fp32" in estimate


def test_login_then_create_and_watch_a_run_with_the_token_on(site, page, tmp_path):
    """A second app on the same home, started with an API token: the browser logs in once and
    everything (form post, live stream, cancel) works through the HttpOnly cookie."""
    token = "pages-token-0123456789"
    home = Home(site.home.path, site.home.corpus, {"TINYGPT_API_TOKEN": token})
    guarded = AppServer(home)
    try:
        page.goto(f"{guarded.url}/new")
        assert page.locator("h1").inner_text() == "Log in"
        assert page.locator("button.link").count() == 0  # no "Log out" before logging in
        page.fill("input[name=token]", "not-the-token")
        page.click(".login-form button")
        assert page.locator("#token-error").inner_text() == "wrong token"
        shot(page, "login")
        page.fill("input[name=token]", token)
        page.click(".login-form button")
        page.wait_for_url(f"{guarded.url}/new")
        cookie = next(c for c in page.context.cookies() if c["name"] == "tinygpt_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["value"] != token
        assert page.evaluate("document.cookie") == ""  # not readable from scripts
        fill_run_form(page, steps=3000, batch_size=4, eval_every=1000, seed=7)
        page.click("form.run-form button[type=submit]")
        page.wait_for_url(f"{guarded.url}/runs/*")
        # pushed over the guarded event stream, which the browser opens with the cookie
        page.wait_for_function("window.runState && window.runState.rows.length >= 1", timeout=120_000)
        assert page.evaluate("window.runState.rows[0].step") == 0
        page.click("#cancel-btn")  # a POST with the cookie, from the dashboard's own page
        page.wait_for_function("document.getElementById('run-status').textContent === 'cancelled'", timeout=60_000)
        assert page.is_hidden("#cancel-btn")
        page.click("button.link")  # log out
        page.wait_for_url(f"{guarded.url}/login")
        page.wait_for_load_state("networkidle")  # the login page's own requests (its icon) before the app stops
    finally:
        guarded.stop()



@pytest.mark.slow
def test_app_killed_and_restarted_while_streaming_every_event_arrives_once(tmp_path, slice_path, warm_cache, page):
    """SIGKILL the app under a browser and a script that both follow a run: both reconnect with
    Last-Event-ID to the restarted app and end up with every event of the run exactly once."""
    import signal
    import threading

    home = Home(tmp_path / "home", slice_path)
    home.path.mkdir()
    home.seed_cache(warm_cache)
    app = AppServer(home)
    worker = Worker(home, "restart")
    followed: list[int] = []
    try:
        with app.client() as c:
            run = c.post("/api/runs", json={**TINY, "steps": 150, "eval_every": 10, "threads": 1}).json()[0]
        url = f"{app.url}/api/runs/{run['id']}/events"
        follower = threading.Thread(target=follow_with_reconnects, args=(url, followed), daemon=True)
        follower.start()
        page.goto(f"{app.url}/runs/{run['id']}")
        page.wait_for_function("window.runState && window.runState.rows.length >= 3", timeout=120_000)
        app.signal(signal.SIGKILL)
        app.popen.wait()
        seen_before = len(followed)
        time.sleep(2)  # both clients find the app gone and retry
        app = AppServer(home, port=app.port)
        follower.join(timeout=300)
        assert not follower.is_alive()
        page.wait_for_function("document.getElementById('run-status').textContent === 'succeeded'", timeout=180_000)
        stream = read_events(url)  # the whole stream, read afresh
        every = [e["id"] for e in stream if "id" in e]
        assert 0 < seen_before < len(every)
        assert followed == every  # the script: each event once, in order, none missing
        handled = ("status", "metric", "sample", "log", "resolved", "best_checkpoint", "alert", "stall", "overfit")
        history = page.evaluate("window.runState.historyEventId")  # metric events up to it came as history
        shown = [e["id"] for e in stream if e["event"] in handled and (e["event"] != "metric" or e["id"] > history)]
        assert [i for i in page.evaluate("window.runState.received") if i] == shown  # the browser: the same
        assert page.evaluate("window.runState.rows.map(r => r.step)") == list(range(0, 151, 10))
        # the browser logged its failed reconnection attempts while the app was down; nothing else
        page.js_errors[:] = [e for e in page.js_errors if "ERR_CONNECTION_REFUSED" not in e
                             and "ERR_INCOMPLETE_CHUNKED_ENCODING" not in e]
    finally:
        worker.stop()
        app.stop()


def follow_with_reconnects(url: str, into: list[int]) -> None:
    """A script following a stream: on a broken connection, reconnect with Last-Event-ID."""
    import httpx

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            last = into[-1] if into else None
            headers = {"Last-Event-ID": str(last)} if last is not None else {}
            with httpx.stream("GET", url, headers=headers, timeout=httpx.Timeout(30, connect=2)) as response:
                event = ""
                for line in response.iter_lines():
                    if line.startswith("id:"):
                        into.append(int(line[3:].strip()))
                    elif line.startswith("event:"):
                        event = line[6:].strip()
                    elif line == "" and event == "end":
                        return
        except httpx.HTTPError:
            time.sleep(0.3)


# -- the API documentation, offline ----------------------------------------------------------------
def offline(page) -> list[str]:
    """Abort every request that leaves this machine (as on a machine without internet); the list of
    what was tried."""
    tried: list[str] = []

    def handle(route):  # noqa: ANN001, ANN202
        host = urlsplit(route.request.url).hostname
        if route.request.url.startswith("data:") or host in ("127.0.0.1", "localhost"):
            return route.continue_()
        tried.append(route.request.url)
        return route.abort("internetdisconnected")

    page.route("**/*", handle)
    return tried


def test_swagger_ui_works_offline_and_tries_an_operation(site, page):
    tried = offline(page)
    page.goto(f"{site.url}/docs")
    page.wait_for_selector(".opblock-summary-path", timeout=30_000)
    paths = page.locator(".opblock-summary-path").all_inner_texts()
    assert "/api/presets" in [p.strip() for p in paths] and "/api/runs" in [p.strip() for p in paths]
    block = page.locator(".opblock-get", has=page.locator(".opblock-summary-path", has_text=re.compile(r"^/api/presets$")))
    block.locator(".opblock-summary").click()
    block.locator("button.try-out__btn").click()
    block.locator("button.execute").click()
    status = block.locator(".live-responses-table tbody .response-col_status").first
    status.wait_for(timeout=30_000)
    assert status.inner_text().strip() == "200"
    assert '"name": "holmes"' in block.locator(".live-responses-table .microlight").first.inner_text()
    shot(page, "api-docs")
    assert tried == [], f"requests off this machine: {tried}"


REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"


def test_redoc_renders_offline(site, page):
    tried = offline(page)
    page.goto(f"{site.url}/redoc")
    page.get_by_text("/api/presets").first.wait_for(state="attached", timeout=30_000)
    assert "TinyGPT Dashboard" in page.locator("h1").first.inner_text()
    page.wait_for_load_state("networkidle")
    page.context.close()  # nothing more is asked for or logged: `tried` and the console are complete (the logo's
    # failed request once reached the console after the filter below, failing the fixture's check)
    # ReDoc's bundle always asks for its maker's logo beside "API docs by Redocly", and hides it when it
    # does not load: the only request it makes off this machine, and nothing depends on it
    assert tried in ([], [REDOC_LOGO]), f"requests off this machine: {tried}"
    page.js_errors[:] = [e for e in page.js_errors if "ERR_INTERNET_DISCONNECTED" not in e]


def test_the_form_has_an_input_per_option_and_shows_each_refusal_next_to_it(site, page):
    """Every option of the declaration has its input; a bad value in each comes back with the library's
    message beside its field (one submission: the server reports every field at once)."""
    from tinygpt.run_config import OPTIONS

    from .test_options import REFUSABLE, bad_message, bad_value

    page.goto(f"{site.url}/new")
    for name in OPTIONS:
        if name != "device":  # the device is the dashboard's own select of this machine's devices
            assert page.locator(f"#new-form [name={name}]").count() == 1, name
    bad = {spec.name: str(bad_value(spec)) for spec in REFUSABLE if spec.name != "device"}
    page.evaluate("""(bad) => {
      for (const [name, value] of Object.entries(bad)) {
        const input = document.querySelector(`#new-form [name=${name}]`);
        if (input.tagName === "SELECT") input.add(new Option(value, value));  // what no select offers
        input.value = value;
      }
    }""", bad)
    page.click("#new-form button[type=submit]")
    page.wait_for_selector("#error-steps")
    for spec in REFUSABLE:
        if spec.name != "device":
            assert page.inner_text(f"#error-{spec.name}") == bad_message(spec), spec.name
    shot(page, "new-run-every-error")


def test_the_form_sets_a_runs_notifications(make_app):
    """The Notifications fieldset: alerts ticked, one webhook URL a line, under the receiver rules."""
    client = make_app()
    form = {"preset": "tiny", "device": "cpu", "precision": "fp32", "steps": "5", "eval_every": "5", "batch_size": "4",
            "notify_events": ["failed", "stalled"], "notify_urls": "https://hooks.example.com/a\n\n https://hooks.example.com/b "}
    page = client.get("/new").text
    assert page.count('name="notify_events"') == 9 and 'value="stalled" checked' in page
    created = client.post("/new", data=form)
    assert created.status_code == 200 and created.headers["hx-redirect"].startswith("/runs/")
    run_id = int(created.headers["hx-redirect"].rsplit("/", 1)[1])
    assert client.get(f"/api/runs/{run_id}").json()["config"]["notify"] == {
        "events": ["failed", "stalled"], "urls": ["https://hooks.example.com/a", "https://hooks.example.com/b"]}
    refused = client.post("/new", data={**form, "notify_urls": "http://127.0.0.1:5432/"})
    assert refused.status_code == 422
    assert ('<span class="field-error" id="error-notify">127.0.0.1 is a loopback address: webhooks go to public '
            'receivers (allow a local one with TINYGPT_WEBHOOK_ALLOW)</span>') in refused.text
    assert "http://127.0.0.1:5432/</textarea>" in refused.text  # what was typed stays in the form
    again = client.get("/new", params={"from": run_id}).text
    assert "https://hooks.example.com/a\nhttps://hooks.example.com/b</textarea>" in again
    assert 'value="failed" checked' in again and 'value="finished" >' in again


def test_the_form_refuses_an_inside_webhook_next_to_its_field(site, page):
    page.goto(f"{site.url}/new")
    page.select_option("select[name=device]", "cpu")
    page.uncheck("#group-notifications input[value=finished]")
    page.fill("textarea[name=notify_urls]", "http://169.254.169.254/latest/meta-data")
    page.click("button[type=submit]")
    page.wait_for_selector("#error-notify")
    assert page.inner_text("#error-notify") == ("169.254.169.254 is a link-local address: webhooks go to public "
                                                "receivers (allow a local one with TINYGPT_WEBHOOK_ALLOW)")
    assert not page.is_checked("#group-notifications input[value=finished]")  # what was ticked stays so
    assert page.is_checked("#group-notifications input[value=failed]") and page.url.endswith("/new")
    page.locator("#group-notifications").scroll_into_view_if_needed()
    shot(page, "new-run-notifications-refused")


def test_a_reader_sees_no_webhook_url_and_no_sample_box(tmp_path, slice_path, browser):
    from .browser import open_page

    token = "pages-reader-token-0123456789"
    home = Home(tmp_path / "home", slice_path, {"TINYGPT_API_TOKEN": token, "TINYGPT_PUBLIC_READ": "true"})
    home.path.mkdir()
    app = AppServer(home)
    try:
        hook = "https://hooks.slack.com/services/T000/B000/XXXXsecretXXXX"
        run = httpx.post(f"{app.url}/api/runs", json={**TINY, "notify": {"events": ["failed"], "urls": [hook]}},
                         headers={"Authorization": f"Bearer {token}"}, timeout=30).json()[0]["id"]
        page = open_page(browser)
        page.goto(f"{app.url}/runs/{run}")
        page.wait_for_selector("#model-locked")
        assert page.locator("#sample-form").count() == 0 and page.locator("#neighbours-form").count() == 0
        assert "failed; also to https://hooks.slack.com/…" in page.inner_text("#config")
        assert "XXXXsecretXXXX" not in page.content()
        shot(page, "run-page-as-a-reader")
        assert page.js_errors == []
        page.context.close()
    finally:
        app.stop()
