"""The Inside view of the holmes model: from the browser's request for ``/runs/{id}/inside?text=...`` (a 256-token
passage, one head enlarged) to every head drawn, as a user opening a copied link waits for it.

A ``tinygpt app`` on this machine holds an imported run with a holmes-preset checkpoint (6 layers x 4 heads,
context 256, its 4,096-token tokenizer trained on the corpus; the weights are random: the timing does not
depend on them). Chromium (Debian's, through Playwright) opens the page: the first time the model is loaded
from its file (cold), then again from the app's model cache (warm, 7 times). Each figure is
``performance.now()`` when ``static/js/inside.js`` has drawn the grid (counted from the navigation's start:
request, forward passes, page, decoding and drawing), with the server's part (the response's end) beside it.

    python -m benchmarks.bench_inside
"""

from __future__ import annotations

import datetime
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlencode

import httpx

from tinygpt.device import cpu_summary

from .common import ROOT, holmes_path, machine

sys.path.insert(0, str(ROOT))
from tests.browser import CHROMIUM  # noqa: E402
from tests.service_helpers import AppServer, Home  # noqa: E402

PASSAGE_TOKENS = 256
WARM_LOADS = 7


def holmes_checkpoint(folder: Path) -> tuple[Path, str]:
    """A holmes-preset checkpoint over the corpus' own tokenizer, and a 256-token passage of the corpus."""
    import torch

    from tinygpt.checkpoint import save_checkpoint
    from tinygpt.corpus import load_or_train_tokenizer, read_corpus
    from tinygpt.model import GPT
    from tinygpt.presets import model_config

    text = read_corpus(holmes_path())
    tokenizer = load_or_train_tokenizer(text, 4096, folder / "cache")
    config = model_config("holmes", vocab_size=tokenizer.vocab_size)
    torch.manual_seed(0)
    path = folder / "best.pt"
    save_checkpoint(path, {"model": GPT(config).state_dict(), "model_config": config.to_dict(), "step": 0,
                           "best_val_loss": 8.3, "tokenizer": tokenizer.to_dict()})
    ids = tokenizer.encode(text[100_000:110_000])[:PASSAGE_TOKENS]
    passage = tokenizer.decode(ids)
    while len(tokenizer.encode(passage)) > PASSAGE_TOKENS:  # a decoded passage may re-encode a token longer
        passage = passage[:-1]
    return path, passage


def imported_run(url: str, checkpoint: Path) -> int:
    run = httpx.post(f"{url}/api/runs/import", timeout=60, json={
        "name": "holmes inside", "device": "cpu", "precision": "fp32", "config": {"preset": "holmes", "steps": 1},
        "metrics": [{"step": 0, "train_loss": 8.3, "val_loss": 8.3, "lr": 0.0, "tokens_per_sec": 1.0,
                     "elapsed_sec": 0.0, "tokens_seen": 0, "epochs": 0.0, "peak_mem_mib": 0.0}]}).json()
    uploaded = httpx.put(f"{url}/api/runs/{run['id']}/checkpoint", content=checkpoint.read_bytes(), timeout=120,
                         headers={"Content-Type": "application/octet-stream"})
    uploaded.raise_for_status()
    return run["id"]


def drawn(page, url: str) -> dict:  # noqa: ANN001
    page.goto(url)
    page.wait_for_function("window.insideState && window.insideState.drawnMs !== null", timeout=120_000)
    return page.evaluate("({drawn_ms: insideState.drawnMs, heads: insideState.heads,"
                         " response_end_ms: performance.getEntriesByType('navigation')[0].responseEnd,"
                         " bytes: performance.getEntriesByType('navigation')[0].transferSize})")


def run() -> dict:
    from playwright.sync_api import sync_playwright

    if CHROMIUM is None:
        raise SystemExit("the Inside benchmark needs Debian's chromium (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        checkpoint, passage = holmes_checkpoint(folder)
        home = Home(folder / "home", holmes_path())
        home.path.mkdir()
        shutil.copytree(folder / "cache", home.path / "cache")
        app = AppServer(home)
        try:
            run_id = imported_run(app.url, checkpoint)
            url = f"{app.url}/runs/{run_id}/inside?" + urlencode({"text": passage, "layer": 5, "head": 3})
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                cold = drawn(page, url)
                warm = [drawn(page, url) for _ in range(WARM_LOADS)]
                browser.close()
            api = httpx.get(f"{app.url}/api/runs/{run_id}/inside", params={"text": passage}, timeout=60)
        finally:
            app.stop()
    times = [w["drawn_ms"] for w in warm]
    return {"machine": machine(), "cpu": cpu_summary(), "date": datetime.date.today().isoformat(),
            "tokens": len(json.loads(api.text)["tokens"]), "heads": cold["heads"], "page_bytes": cold["bytes"],
            "api_bytes": len(api.content), "cold_ms": round(cold["drawn_ms"]),
            "cold_response_ms": round(cold["response_end_ms"]), "warm_median_ms": round(statistics.median(times)),
            "warm_max_ms": round(max(times)),
            "warm_response_median_ms": round(statistics.median(w["response_end_ms"] for w in warm))}


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
