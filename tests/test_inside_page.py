"""The run's Inside page: in-process (what it shows, what it refuses, who may see it) and in Chromium over a real
service with a worker: the head grid of two architectures, a head enlarged on click, a token's top 5 on hover,
where a token looks, the head scores over training drawn from the run's records, a copied link restoring the
view, the validation passage, the two-model difference, the embedding map and the downloads."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from .browser import needs_chromium, open_page, shot
from .service_helpers import create, run_status, wait_for

TEXT = "Holmes said to Watson that the door was open."


# -- in-process ---------------------------------------------------------------------------------------------
def test_the_page_shows_the_apis_numbers(make_app, imported_run, write_checkpoint, tmp_path):
    client = make_app()
    run_id = imported_run(client, write_checkpoint(tmp_path / "best.pt"))
    params = {"text": "Holmes said to Watson", "layer": 0, "head": 1}
    api = client.get(f"/api/runs/{run_id}/inside", params=params).json()
    page = client.get(f"/runs/{run_id}/inside", params=params)
    assert page.status_code == 200
    summary = re.sub(r"<[^>]+>", "", re.search(r'<p id="inside-summary">(.*?)</p>', page.text).group(1))
    assert summary == (f"{api['mean_loss']:.4f} nats per token ({api['mean_loss_bits']:.3f} bits) · "
                       f"{api['bits_per_byte']:.3f} bits per byte · {len(api['tokens'])} tokens, "
                       f"{len(api['token_loss'])} predicted")
    assert page.text.count('class="tok') == len(api["tokens"])
    assert api["attention_u8"] in page.text  # the grid is drawn from the API's bytes
    assert f'<a href="/runs/{run_id}/inside" id="inside-tab" aria-current="page">Inside</a>' in page.text
    assert client.get(f"/runs/{run_id}").text.count(f'href="/runs/{run_id}/inside" id="inside-tab"') == 1


@pytest.mark.parametrize("params, message", [
    ({"text": "x"}, "<strong>text</strong>: text is 1 tokens; a passage is 2 to 16 (the model&#39;s context)"),
    ({"text": "Holmes said", "colour": "red"}, "<strong>colour</strong>: Extra inputs are not permitted"),
    ({"text": "Holmes said", "checkpoint": "step-9"}, "run 1 keeps no checkpoint step-9"),
    ({"source": "passage", "passage": "0"}, "<strong>passage</strong>: this run&#39;s corpus is not on this "
                                            "machine: type a passage instead"),
])
def test_bad_views_are_refused_beside_the_form(make_app, imported_run, write_checkpoint, tmp_path, params, message):
    client = make_app()
    run_id = imported_run(client, write_checkpoint(tmp_path / "best.pt"))
    page = client.get(f"/runs/{run_id}/inside", params=params)
    assert page.status_code in (404, 422)
    assert re.search(r'<div class="error-box" id="inside-error" role="alert">(.*?)</div>', page.text).group(1) == message
    assert 'id="inside-form"' in page.text  # the form stays, with what was typed


def test_a_run_without_a_checkpoint_says_so_and_a_reader_without_the_token_is_asked_to_log_in(make_app,
                                                                                              imported_run):
    client = make_app()
    run_id = imported_run(client)
    page = client.get(f"/runs/{run_id}/inside")
    assert page.status_code == 200 and f"run {run_id} has no checkpoint yet: the Inside view" in page.text
    locked = make_app(api_token="inside-test-token-0123456789", public_read=True)
    run_id = imported_run(locked, headers={"Authorization": "Bearer inside-test-token-0123456789"})
    page = locked.get(f"/runs/{run_id}/inside", params={"text": TEXT})
    assert 'id="model-locked"' in page.text and 'id="inside-form"' not in page.text and "inside-summary" not in page.text
    closed = make_app(api_token="inside-test-token-0123456789")
    assert closed.get(f"/runs/{run_id}/inside", follow_redirects=False).status_code in (303, 401)


# -- Chromium ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def service(start_service):  # noqa: ANN001, ANN201
    return start_service("inside-page", workers=("inside-worker",))


@pytest.fixture(scope="module")
def trained_run(service) -> dict:  # noqa: ANN001
    """A tiny run trained by the service's worker (4 layers x 4 heads), its scores recorded at every evaluation
    and a checkpoint kept every 10 steps."""
    client = service.app.client()
    run = create(client, name="inside", steps=30, eval_every=10, keep_every=10, sample_tokens=0)
    wait_for(lambda: run_status(client, run["id"]) in ("succeeded", "failed"), timeout=240, message="the run")
    assert run_status(client, run["id"]) == "succeeded"
    return run


@pytest.fixture(scope="module")
def classic_run(service, tmp_path_factory) -> int:  # noqa: ANN001
    """An imported run whose checkpoint is another architecture: learned positions, 1 layer x 2 heads."""
    from .conftest import IMPORTED_RUN, checkpoint_file

    client = service.app.client()
    tokenizer = client_tokenizer(service)
    path = checkpoint_file(tmp_path_factory.mktemp("classic") / "best.pt", tokenizer, vocab_size=4096, context=64,
                           pos="learned", mlp="relu2", n_layers=1, n_heads=2)
    response = client.post("/api/runs/import", json={**IMPORTED_RUN, "name": "classic"})
    run_id = response.json()["id"]
    uploaded = client.put(f"/api/runs/{run_id}/checkpoint", content=path.read_bytes(),
                          headers={"Content-Type": "application/octet-stream"})
    assert uploaded.status_code == 200, uploaded.text
    return run_id


def client_tokenizer(service) -> dict:  # noqa: ANN001
    """The service's tiny-preset tokenizer (its seeded cache), as a checkpoint holds it."""
    import json

    cache = service.home.path / "cache" / "tokenizers"
    return json.loads(next(cache.glob("*-4096.json")).read_text())


def head_page(page, url: str) -> dict:  # noqa: ANN001
    page.goto(url)
    page.wait_for_function("window.insideState && window.insideState.drawnMs !== null")
    return page.evaluate("({heads: insideState.heads, enlarged: insideState.enlarged})")


@needs_chromium
@pytest.mark.parametrize("which, layers, heads", [("trained", 4, 4), ("classic", 1, 2)])
def test_the_grid_draws_every_head_a_click_enlarges_one_and_a_copied_link_restores_it(
        service, trained_run, classic_run, browser, which, layers, heads):
    run_id = trained_run["id"] if which == "trained" else classic_run
    url = f"{service.app.url}/runs/{run_id}/inside"
    page = open_page(browser)
    page.goto(url)
    page.fill("#inside-text", TEXT)
    page.click("#inside-btn")
    page.wait_for_function("window.insideState.drawnMs !== null")
    assert page.evaluate("insideState.heads") == layers * heads
    assert page.locator(".head-cell").count() == layers * heads
    assert page.is_hidden("#head-large")
    page.click(f".head-cell[data-layer='{layers - 1}'][data-head='{heads - 1}']")
    assert page.is_visible("#head-large")
    assert page.inner_text("#head-title").startswith(f"Layer {layers - 1}, head {heads - 1} (induction ")
    query = parse_qs(urlsplit(page.url).query)
    assert (query["layer"], query["head"], query["text"]) == ([str(layers - 1)], [str(heads - 1)], [TEXT])
    api = httpx.get(f"{service.app.url}/api/runs/{run_id}/inside", params={"text": TEXT}, timeout=60).json()
    page.hover(".passage .tok[data-i='2']")  # its top 5, and where it looks in the enlarged head
    tip = page.inner_text(".passage .tok[data-i='2'] .top5")
    assert tip.startswith(f"loss {api['token_loss'][1]:.3f} nats")
    assert f"{api['top'][2][0]['text'].strip()} {api['top'][2][0]['prob'] * 100:.1f}%" in tip
    looks = page.evaluate("[...document.querySelectorAll('#passage .tok')].slice(0, 4).map("
                          "(t) => +t.style.getPropertyValue('--look'))")
    u8 = base64.b64decode(api["attention_u8"])
    t = len(api["tokens"])
    row = [u8[(((layers - 1) * heads + heads - 1) * t + 2) * t + k] / 255 for k in range(4)]
    assert looks == pytest.approx([row[0], row[1], row[2], 0], abs=1e-3)
    shot(page, f"inside-{which}")
    copied = open_page(browser)
    assert head_page(copied, page.url) == {"heads": layers * heads, "enlarged": [layers - 1, heads - 1]}
    assert copied.inner_text("#head-title") == page.inner_text("#head-title")
    for p in (page, copied):
        p.context.close()
        assert p.js_errors == [], p.js_errors


@needs_chromium
def test_the_scores_over_training_are_drawn_from_the_runs_records(service, trained_run, browser):
    run_id = trained_run["id"]
    recorded = httpx.get(f"{service.app.url}/api/runs/{run_id}/head-scores", timeout=30).json()
    assert recorded["steps"] == [0, 10, 20, 30] and (recorded["layers"], recorded["heads"]) == (4, 4)
    page = open_page(browser)
    page.goto(f"{service.app.url}/runs/{run_id}/inside")
    page.wait_for_selector("#scores-chart canvas")
    drawn = page.evaluate("insideState.scoresPlot.data")
    assert drawn[0] == recorded["steps"] and drawn[1] == recorded["val_loss"]
    assert drawn[2:] == [[rows[layer][head] for rows in recorded["scores"]["induction"]]
                         for layer in range(4) for head in range(4)]
    page.select_option("#score-select", "previous_token")
    assert page.evaluate("insideState.scoresDrawn") == "previous_token"
    assert page.evaluate("insideState.scoresPlot.data[2]") == [rows[0][0] for rows in
                                                               recorded["scores"]["previous_token"]]
    assert page.get_attribute("#scores-chart", "aria-label").startswith(
        "best head's previous token by step: 4 rows (steps 0 to 30)")
    assert parse_qs(urlsplit(page.url).query)["score"] == ["previous_token"]
    page.reload()  # the address keeps the chart's score
    page.wait_for_selector("#scores-chart canvas")
    assert page.evaluate("insideState.scoresDrawn") == "previous_token"
    shot(page, "inside-scores")
    page.context.close()
    assert page.js_errors == [], page.js_errors


@needs_chromium
def test_a_validation_passage_against_a_kept_checkpoint_and_the_downloads(service, trained_run, browser, tmp_path):
    run_id = trained_run["id"]
    url = f"{service.app.url}/runs/{run_id}/inside"
    page = open_page(browser, accept_downloads=True)
    page.goto(url)
    assert page.locator("#checkpoint option").all_inner_texts() == ["best (step 30)", "step-10 (step 10)",
                                                                    "step-20 (step 20)", "step-30 (step 30)"]
    page.select_option("#checkpoint", "step-10")
    page.check("input[name=source][value=passage]")
    page.fill("input[name=passage]", "2")
    page.fill("input[name=other]", str(run_id))
    page.fill("input[name=other_checkpoint]", "step-30")
    page.click("#inside-btn")
    page.wait_for_function("window.insideState.drawnMs !== null")
    diff = httpx.get(f"{service.app.url}/api/runs/{run_id}/inside/diff", timeout=60, params={
        "passage": 2, "checkpoint": "step-10", "other": run_id, "other_checkpoint": "step-30"}).json()
    context = httpx.get(f"{service.app.url}/api/runs/{run_id}/inside/checkpoints", timeout=60).json()["context"]
    assert context == 128 and page.locator("#passage .tok").count() == context  # one window of the split
    assert page.inner_text("#diff-summary") == (
        f"mean loss {diff['mean_loss']:.4f} here, {diff['other_mean_loss']:.4f} there: {diff['mean_difference']:+.4f} "
        f"nats per token (the other predicts better)")
    assert page.locator("#diff-passage .tok.better").count() > page.locator("#diff-passage .tok.worse").count()
    page.click(".head-cell[data-layer='0'][data-head='0']")
    with page.expect_download() as svg:
        page.click("#head-svg")
    text = Path(svg.value.path()).read_text()
    assert text.startswith('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 128 128"')
    with page.expect_download() as png:
        page.click("#grid-png")
    assert Path(png.value.path()).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with page.expect_download() as numbers:
        page.click("#inside-json")
    assert Path(numbers.value.path()).read_text().startswith('{"tokens":')
    shot(page, "inside-passage-diff")
    page.click("#embeddings-load")
    page.wait_for_function("window.insideState.embeddings !== null")
    page.fill("#embeddings-find", " Holmes")
    assert page.inner_text("#embeddings-note") == "1 token found"
    page.click("#embeddings-map", position={"x": 450, "y": 300})
    page.wait_for_selector("#embeddings-neighbours li")
    assert page.locator("#embeddings-neighbours li").count() == 8
    shot(page, "inside-embeddings")
    page.context.close()
    assert page.js_errors == [], page.js_errors
