"""Behind a TLS-terminating reverse proxy, under a path prefix: ``https://127.0.0.1:PORT/tinygpt/``.

The proxy (``tests/reverse_proxy.py``) strips the prefix and forwards to the app over plain HTTP, as
nginx would; the app is told its prefix (``TINYGPT_ROOT_PATH``) and, like an app whose proxy runs on
another host, does not trust the proxy's ``X-Forwarded-*`` headers (``TINYGPT_FORWARDED_ALLOW_IPS``
names another address). Every page must still work in Chromium: styles, htmx and charts load, the
form starts a run, the run page's chart fills from the event stream, the sample box streams, and
no request leaves the prefix or goes out over plain HTTP.
"""

from __future__ import annotations

import subprocess
import sys
import time
from urllib.parse import urlsplit

import httpx
import pytest

from .browser import fill_run_form, needs_chromium, open_page, shot
from .reverse_proxy import self_signed_certificate
from .service_helpers import ROOT, AppServer, Home, Worker, free_port

pytestmark = [needs_chromium, pytest.mark.slow]  # 80 s: `make test-slow` (CI runs it)
PREFIX = "/tinygpt"


@pytest.fixture(scope="module")
def proxied(tmp_path_factory, slice_path, warm_cache):
    folder = tmp_path_factory.mktemp("proxy")
    home = Home(folder / "home", slice_path, {"TINYGPT_ROOT_PATH": PREFIX, "TINYGPT_FORWARDED_ALLOW_IPS": "192.0.2.1"})
    home.path.mkdir()
    home.seed_cache(warm_cache)
    app = AppServer(home)
    worker = Worker(home, "proxied")
    cert, key = self_signed_certificate(folder)
    port = free_port()
    proxy = subprocess.Popen([sys.executable, "-m", "tests.reverse_proxy", "--port", str(port), "--prefix", PREFIX,
                              "--upstream", app.url, "--certfile", str(cert), "--keyfile", str(key)], cwd=ROOT)
    base = f"https://127.0.0.1:{port}{PREFIX}"
    for _ in range(100):
        try:
            if httpx.get(f"{base}/healthz", verify=False, timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    yield base
    proxy.terminate()
    proxy.wait()
    worker.stop()
    app.stop()


def test_every_page_works_under_the_prefix_over_https(proxied, browser):
    page = open_page(browser, ignore_https_errors=True)
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(f"{proxied}/")
    # styles, htmx and uPlot came through the proxy
    assert page.evaluate("typeof htmx") == "object" and page.evaluate("typeof uPlot") == "function"
    assert page.evaluate("getComputedStyle(document.querySelector('header.top')).display") == "flex"

    page.click("text=New run")
    page.wait_for_url(f"{proxied}/new")
    fill_run_form(page, steps=20, batch_size=4, eval_every=10, name="behind a proxy")
    page.click("button[type=submit]")
    page.wait_for_url(f"{proxied}/runs/*")
    # the chart fills from the run's event stream, through the proxy
    page.wait_for_function("window.runState && window.runState.status === 'succeeded'", timeout=120_000)
    assert page.evaluate("window.runState.rows.length") >= 3
    page.click("#sample-btn")
    page.wait_for_function("document.querySelector('#sample-output').textContent.length > 10", timeout=60_000)
    shot(page, "proxy-run")

    page.click("text=Runs")
    page.wait_for_url(f"{proxied}/")
    link = page.locator("table.runs a", has_text="behind a proxy")
    assert link.get_attribute("href").startswith(f"{PREFIX}/runs/")
    page.click("text=API")
    page.wait_for_selector(".opblock-summary-path", timeout=30_000)

    outside = [u for u in requests if not u.startswith(proxied + "/") and not u.startswith("data:")]
    assert outside == [], f"requests outside https://.../tinygpt/: {outside}"
    assert any("/api/runs/" in u and urlsplit(u).path.endswith("/events") for u in requests)  # the run's stream
    assert any(u.endswith("/api/events") for u in requests)  # the run list's stream
    assert page.js_errors == [], page.js_errors
    page.context.close()
