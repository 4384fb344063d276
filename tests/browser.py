"""Chromium for the page tests: Debian's build driven by Playwright (its own browser download is not
used), one browser per test module, a fresh page per test that fails on any JavaScript error."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
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


def open_page(browser, **context_options: object):  # noqa: ANN001, ANN201
    """A page whose JavaScript errors collect in ``page.js_errors``."""
    context = browser.new_context(**{"viewport": {"width": 1280, "height": 900}, **context_options})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on("console", lambda msg: errors.append(msg.text)
          if msg.type == "error" and not any(e in msg.text for e in EXPECTED_CONSOLE) else None)
    pg.js_errors = errors
    return pg


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
