"""Chromium for the page tests: Debian's build driven by Playwright (its own browser download is not
used), one browser per test module, a fresh page per test that fails on any JavaScript error."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: axe-core (scripts/install-axe.sh puts it in the virtual environment): run on every page a browser test opens
AXE = Path(sys.prefix) / "axe-core-4.10.3" / "axe.min.js"
#: pages not ours, never checked: the vendored Swagger UI (/docs) and ReDoc (/redoc)
AXE_EXEMPT = ("/docs", "/redoc")
#: what fails every browser test that opens a page with it; the accessibility test wants none of any impact
AXE_FAILING = ("serious", "critical")
AXE_RUNNER = """
window.addEventListener("load", () => setTimeout(async () => {
  const result = await axe.run(document, { resultTypes: ["violations"] });
  window.__reportAxe(location.pathname + location.search, result.violations.map((v) => ({
    id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map((n) => n.target.join(" ")) })));
}, 200));
"""
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")
# Chromium logs every 4xx fetch on the console; a 422 for a form with errors and the 401 of a login
# page are expected.
EXPECTED_CONSOLE = ("the server responded with a status of 422", "the server responded with a status of 401")


@pytest.fixture(scope="module")
def browser() -> Iterator:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run", "--disable-quic"])
        yield b
        b.close()


@cache
def axe_script() -> str:
    """axe-core, then its run on each top-level page's load (pages not ours left out), reporting back."""
    if not AXE.is_file():
        raise RuntimeError(f"{AXE} is missing: run scripts/install-axe.sh (make test does)")
    exempt = " || ".join(f'location.pathname.endsWith("{p}")' for p in AXE_EXEMPT)
    return f"(() => {{ if (window.top !== window || {exempt}) return;\n{AXE.read_text()}\n{AXE_RUNNER}}})();"


def open_page(browser, **context_options: object):  # noqa: ANN001, ANN201
    """A page whose JavaScript errors collect in ``page.js_errors``, and with them each serious or critical
    accessibility violation axe-core finds on a page it opens (``page.axe_results``: every page's, all
    impacts)."""
    context = browser.new_context(**{"viewport": {"width": 1280, "height": 900}, **context_options})
    errors: list[str] = []
    results: dict[str, list[dict]] = {}

    def report(source: object, url: str, violations: list[dict]) -> None:
        results[url] = violations
        errors.extend(f"axe: {v['impact']} {v['id']} on {url}: {v['help']} ({', '.join(v['nodes'])})"
                      for v in violations if v["impact"] in AXE_FAILING)

    context.expose_binding("__reportAxe", report)
    context.add_init_script(script=axe_script())
    pg = context.new_page()
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on("console", lambda msg: errors.append(msg.text)
          if msg.type == "error" and not any(e in msg.text for e in EXPECTED_CONSOLE) else None)
    pg.js_errors = errors
    pg.axe_results = results
    return pg


def axe_of(page, path: str, timeout_ms: int = 10_000) -> list[dict]:  # noqa: ANN001
    """The violations axe found on the page at ``path`` (its path and query), waiting for its run; clear
    ``page.axe_results`` before opening the same page again."""
    waited = 0
    while path not in page.axe_results:
        if waited > timeout_ms:
            raise AssertionError(f"axe did not report on {path}; it did on {list(page.axe_results)}")
        page.wait_for_timeout(100)
        waited += 100
    return page.axe_results[path]


@pytest.fixture
def page(browser) -> Iterator:  # noqa: ANN001
    pg = open_page(browser)
    yield pg
    pg.context.close()
    assert pg.js_errors == [], f"JavaScript errors: {pg.js_errors}"


def fill_run_form(page, **values: object) -> None:  # noqa: ANN001
    """The new-run form for a quick run on the CPU in fp32 (2 batches an evaluation, 1 thread), then ``values``
    typed into the inputs of those names (an advanced one's section opened first)."""
    page.select_option("select[name=device]", "cpu")
    page.select_option("select[name=precision]", "fp32")
    for name, value in {"eval_batches": 2, "threads": 1, **values}.items():
        field = page.locator(f"#new-form input[name={name}]")
        field.evaluate("input => { const section = input.closest('details'); if (section) section.open = true; }")
        field.fill(str(value))


def shot(page, name: str) -> None:  # noqa: ANN001
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
