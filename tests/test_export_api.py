"""``GET /api/runs/{id}/export`` (in-process: the request and its answers) and the run page's download buttons
(Chromium over a real app process): the files they give are read by transformers and llama.cpp."""

from __future__ import annotations

import io
import zipfile

import httpx
import pytest
import torch
import transformers

from tinygpt.checkpoint import load_model
from tinygpt.sample import nearest_tokens

from .browser import needs_chromium, open_page, shot

OCTETS = {"Content-Type": "application/octet-stream"}


@pytest.fixture
def app_with_runs(make_app, imported_run, trained):  # noqa: ANN201
    """An in-process app with two imported runs: one holding a trained modern model, one of a mix no stock class
    holds (RoPE, RMSNorm, GELU)."""
    client = make_app()
    good = imported_run(client, trained("modern") / "best.pt")
    mix = imported_run(client, trained("modern", mlp="gelu") / "best.pt",
                       config={"preset": "tiny", "steps": 10, "eval_every": 10, "mlp": "gelu"})
    return client, good, mix


def test_a_transformers_zip_holds_the_folder_and_loads(app_with_runs, tmp_path):
    client, run, _ = app_with_runs
    response = client.get(f"/api/runs/{run}/export", params={"format": "hf"})
    assert response.status_code == 200, response.text
    name = f"run-{run}-transformers-fp32"
    assert response.headers["content-disposition"] == f'attachment; filename="{name}.zip"'
    with zipfile.ZipFile(io.BytesIO(response.content)) as archive:
        assert sorted(archive.namelist()) == sorted(f"{name}/{f}" for f in (
            "README.md", "config.json", "generation_config.json", "loss_curve.svg", "model.safetensors",
            "tokenizer.json", "tokenizer_config.json"))
        archive.extractall(tmp_path)
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / name).eval()
    ours, tokenizer, _ = load_model(client.app.state.settings.runs_dir / str(run) / "best.pt")
    ids = torch.tensor([tokenizer.encode("Holmes")])
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, ours(ids)[0], atol=1e-4, rtol=0)


def test_an_export_is_kept_until_the_checkpoint_changes(app_with_runs, trained):
    client, run, _ = app_with_runs
    first = client.get(f"/api/runs/{run}/export", params={"format": "gguf", "quant": "q8_0"})
    assert first.status_code == 200 and first.content[:4] == b"GGUF"
    assert first.headers["content-disposition"] == f'attachment; filename="run-{run}-q8_0.gguf"'
    kept = client.app.state.settings.runs_dir / str(run) / "exports" / f"run-{run}-q8_0.gguf"
    made = kept.stat().st_mtime_ns
    assert client.get(f"/api/runs/{run}/export", params={"format": "gguf", "quant": "q8_0"}).content == first.content
    assert kept.stat().st_mtime_ns == made  # served as kept
    replaced = client.put(f"/api/runs/{run}/checkpoint", headers=OCTETS,
                          content=(trained("series") / "best.pt").read_bytes())
    assert replaced.status_code == 200, replaced.text
    again = client.get(f"/api/runs/{run}/export", params={"format": "gguf", "quant": "q8_0"})
    assert again.status_code == 200 and again.content != first.content and kept.stat().st_mtime_ns > made
    assert [p.name for p in kept.parent.iterdir()] == [kept.name]  # nothing half-made left behind


@pytest.mark.parametrize("params, field, message", [
    ({"format": "onnx"}, "format", "Input should be 'hf', 'gguf' or 'safetensors'"),
    ({"format": "hf", "quant": "q8_0"}, None, "Value error, quant q8_0 applies to the gguf format only, not hf"),
    ({"format": "gguf", "dtype": "fp8"}, "dtype", "Input should be 'fp32', 'bf16' or 'fp16'"),
    ({"format": "gguf", "bits": "4"}, "bits", "unknown field 'bits'"),
])
def test_bad_export_queries_are_refused_naming_what_is_wrong(app_with_runs, params, field, message):
    client, run, _ = app_with_runs
    response = client.get(f"/api/runs/{run}/export", params=params)
    assert response.status_code == 422
    error = response.json()["detail"][0]
    assert error["msg"].startswith(message), error
    if field:
        assert error["loc"][-1] == field


def test_a_mix_no_stock_class_holds_is_refused_and_nothing_is_kept(app_with_runs):
    client, _, mix = app_with_runs
    response = client.get(f"/api/runs/{mix}/export", params={"format": "gguf"})
    assert response.status_code == 422
    assert response.json()["detail"] == [{"loc": ["body", "format"], "type": "value_error", "msg": (
        "no stock class holds pos rope, norm rmsnorm, mlp gelu; these export: pos rope, norm rmsnorm, mlp swiglu "
        "without biases (modern: LlamaForCausalLM, llama.cpp llama); pos rope, norm layernorm, mlp gelu (series: "
        "GPTNeoXForCausalLM, llama.cpp gptneox); pos learned, norm layernorm, mlp gelu (classic: GPT2LMHeadModel, "
        "llama.cpp gpt2)")}]
    assert list((client.app.state.settings.runs_dir / str(mix) / "exports").iterdir()) == []
    assert client.get(f"/api/runs/{mix + 1000}/export", params={"format": "gguf"}).status_code == 404


@needs_chromium
def test_the_run_page_downloads_files_transformers_and_llama_cpp_read(start_service, trained, browser, tmp_path):
    from llama_cpp import Llama

    from .conftest import IMPORTED_RUN

    app = start_service("export-page").app
    runs = {}
    for name, source, extra in (("good", trained("series"), {"arch": "series"}), ("mix", trained("modern", mlp="gelu"), {"mlp": "gelu"})):
        body = {**IMPORTED_RUN, "name": name, "config": {**IMPORTED_RUN["config"], **extra}}
        runs[name] = httpx.post(f"{app.url}/api/runs/import", json=body, timeout=30).json()["id"]
        uploaded = httpx.put(f"{app.url}/api/runs/{runs[name]}/checkpoint", headers=OCTETS, timeout=30,
                             content=(source / "best.pt").read_bytes())
        assert uploaded.status_code == 200, uploaded.text
    ours, tokenizer, _ = load_model(trained("series") / "best.pt")
    ids = tokenizer.encode("Holmes")
    page = open_page(browser)
    page.goto(f"{app.url}/runs/{runs['good']}")
    assert page.inner_text("#export-hf") == "For transformers" and page.inner_text("#export-gguf") == "For llama.cpp"
    shot(page, "run-page-export-buttons")
    with page.expect_download() as download:
        page.click("#export-hf")
    with zipfile.ZipFile(download.value.path()) as archive:
        archive.extractall(tmp_path)
    folder = next(tmp_path.glob("run-*-transformers-fp32"))
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        torch.testing.assert_close(model(torch.tensor([ids])).logits[0], ours(torch.tensor([ids]))[0][0], atol=1e-4,
                                   rtol=0)
    with page.expect_download() as download:
        page.click("#export-gguf")
    assert download.value.suggested_filename == f"run-{runs['good']}-fp32.gguf"
    llm = Llama(str(download.value.path()), n_ctx=256, logits_all=True, verbose=False, n_threads=2)
    try:
        assert llm.tokenize(b"Holmes", add_bos=False, special=False) == ids
    finally:
        llm.close()
    page.goto(f"{app.url}/runs/{runs['mix']}")
    assert page.locator("#export-hf").count() == 0
    assert page.inner_text("#export-refusal") == "no export: this architecture has no stock class"
    assert page.get_attribute("#export-refusal", "title").startswith("no stock class holds pos rope, norm rmsnorm")
    page.context.close()
    assert page.js_errors == [], page.js_errors



@needs_chromium
def test_the_model_card_renders_as_markdown_with_its_tables_and_loss_curve(trained, browser, tmp_path):
    """The card as a model hub shows it: CommonMark with tables (markdown-it-py, the renderer of the export-test
    extra), in Chromium: every table filled, the loss curve image drawn."""
    from markdown_it import MarkdownIt

    from tinygpt.export import export

    folder = export(trained("classic"), tmp_path / "hf", format="hf")
    body = (folder / "README.md").read_text(encoding="utf-8").split("---\n", 2)[2]
    (folder / "card.html").write_text(f"<!doctype html><html lang=en><meta charset=utf-8><title>Model card</title>"
                                      f"<body style='font-family:sans-serif'>"
                                      f"{MarkdownIt('commonmark').enable('table').render(body)}", encoding="utf-8")
    page = open_page(browser)
    page.goto((folder / "card.html").as_uri())
    page.wait_for_function("document.querySelector('img').complete")
    assert page.evaluate("document.querySelector('img').naturalWidth") == 640
    assert page.locator("h2").all_inner_texts() == ["Results", "Model", "Training", "Samples", "Use it",
                                                     "How it was made"]
    assert page.locator("table").count() == 3
    assert page.locator("tr", has=page.locator("td", has_text="architecture")).inner_text().endswith(
        "classic (pos learned, norm layernorm, mlp gelu (classic: GPT2LMHeadModel, llama.cpp gpt2))")
    shot(page, "model-card")
    page.context.close()
    assert page.js_errors == [], page.js_errors


def test_an_uploaded_safetensors_export_serves_samples_and_exports(make_app, imported_run, trained, tmp_path):
    """The dashboard takes an exported .safetensors as a run's checkpoint: its model answers and exports."""
    from tinygpt.export import export

    client = make_app()
    file = export(trained("modern"), tmp_path / "model.safetensors", format="safetensors")
    run = imported_run(client, file)
    kept = client.app.state.settings.runs_dir / str(run) / "best.safetensors"
    assert kept.read_bytes() == file.read_bytes()
    download = client.get(f"/api/runs/{run}/checkpoint")
    assert download.headers["content-disposition"] == f'attachment; filename="run-{run}-best.safetensors"'
    ours, tokenizer, _ = load_model(trained("modern") / "best.pt")
    theirs = client.get(f"/api/runs/{run}/neighbors", params={"word": " the", "k": 3})
    assert theirs.status_code == 200, theirs.text
    assert [row["token"] for row in theirs.json()] == [t for t, _ in nearest_tokens(ours, tokenizer, " the", 3)]
    gguf = client.get(f"/api/runs/{run}/export", params={"format": "gguf"})
    assert gguf.status_code == 200 and gguf.content[:4] == b"GGUF"
