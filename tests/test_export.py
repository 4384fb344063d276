"""Exports checked against readers nobody here wrote: ``transformers`` loads the folder ``tinygpt export --format
hf`` writes and computes our logits and our greedy text; ``tokenizers`` encodes text to our ids; ``transformers``'
GGUF loader (Llama, GPT-2) and llama.cpp (``llama-cpp-python``: every family) read the GGUF file.

The default suite exports the tiny preset in every family (and the mixes that map onto one with zero biases);
the slow suite (``make test-slow``) every preset x architecture the product ships and the whole Holmes corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers  # the export-test extra (make test installs it)

from tinygpt.checkpoint import load_model
from tinygpt.cli import main
from tinygpt.export import export
from tinygpt.export.families import ExportError
from tinygpt.presets import ARCHS, PRESETS
from tinygpt.sample import generate

PROMPTS = ["Holmes", "It is a capital mistake to theorize", "\n\n  Watson, 1891: £5!"]
#: The stock class each of our configurations loads as (the last two: mixes held with zero biases).
FAMILY_CASES = {
    "modern": ("modern", {}, "LlamaForCausalLM"),
    "series": ("series", {}, "GPTNeoXForCausalLM"),
    "classic": ("classic", {}, "GPT2LMHeadModel"),
    "modern-untied": ("modern", {"untied_head": True}, "LlamaForCausalLM"),
    "series-untied": ("series", {"untied_head": True}, "GPTNeoXForCausalLM"),
    "classic-untied": ("classic", {"untied_head": True}, "GPT2LMHeadModel"),
    "modern-layernorm-gelu": ("modern", {"norm": "layernorm", "mlp": "gelu"}, "GPTNeoXForCausalLM"),
    "classic-rope": ("classic", {"pos": "rope"}, "GPTNeoXForCausalLM"),
}


def our_logits(model, ids: list[int]) -> torch.Tensor:  # noqa: ANN001
    with torch.no_grad():
        return model(torch.tensor([ids]))[0][0]  # (T, vocab)


def check_transformers_folder(run: Path, folder: Path, hf_class: str) -> None:
    """transformers' class and tokenizer: our ids and logits (within 1e-4) on every prompt, and our greedy text."""
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    assert type(model).__name__ == hf_class
    ours, tokenizer, _ = load_model(run / "best.pt")
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    for text in PROMPTS:
        ids = hf_tokenizer(text)["input_ids"]
        assert ids == tokenizer.encode(text)
        with torch.no_grad():
            theirs = model(torch.tensor([ids])).logits[0]
        torch.testing.assert_close(theirs, our_logits(ours, ids), atol=1e-4, rtol=0)
    ids = tokenizer.encode(PROMPTS[1])
    greedy = model.generate(torch.tensor([ids]), max_new_tokens=64, do_sample=False)[0, len(ids):].tolist()
    assert greedy == list(generate(ours, ids, 64, temperature=0))


@pytest.mark.parametrize("case", list(FAMILY_CASES))
def test_transformers_loads_each_family_and_computes_our_logits_and_greedy_text(trained, tmp_path, case):
    arch, options, hf_class = FAMILY_CASES[case]
    run = trained(arch, **options)
    check_transformers_folder(run, export(run, tmp_path / "hf", format="hf"), hf_class)


@pytest.mark.slow  # 12 short trainings up to the 5.8M-parameter holmes model (45 s on 2 cores)
@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("arch", list(ARCHS))
def test_every_preset_and_architecture_exports_for_transformers(trained, tmp_path, preset, arch):
    run = trained(arch, preset=preset)
    family = {"modern": "LlamaForCausalLM", "series": "GPTNeoXForCausalLM", "classic": "GPT2LMHeadModel"}[arch]
    check_transformers_folder(run, export(run, tmp_path / "hf", format="hf"), family)


def test_greedy_text_equals_tinygpt_sample_at_temperature_zero(trained, tmp_path, capsys):
    run = trained("series")
    folder = export(run, tmp_path / "hf", format="hf")
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    ids = hf_tokenizer("Holmes", return_tensors="pt").input_ids
    theirs = hf_tokenizer.decode(model.generate(ids, max_new_tokens=64, do_sample=False)[0])
    assert main(["sample", str(run / "best.pt"), "--prompt", "Holmes", "--max-tokens", "64", "--temperature", "0"]) == 0
    assert capsys.readouterr().out == theirs + "\n"


def test_the_exported_tokenizer_encodes_the_slice_to_our_ids_and_back(trained, tmp_path, slice_path):
    from tokenizers import Tokenizer as HfTokenizer

    run = trained("modern")
    folder = export(run, tmp_path / "hf", format="hf")
    _, tokenizer, _ = load_model(run / "best.pt")
    hf = HfTokenizer.from_file(str(folder / "tokenizer.json"))
    text = slice_path.read_text(encoding="utf-8")
    ids = hf.encode(text).ids
    assert ids == tokenizer.encode(text)
    assert hf.decode(ids) == text


@pytest.mark.slow  # our encoder over the whole corpus (9 s)
def test_the_exported_series_tokenizer_encodes_the_whole_corpus_to_our_ids(holmes_path, tmp_path, cache_dir):
    """The series' tokenizer (4,096 ids, trained on the whole corpus) through tokenizers: 1,033,352 ids, ours."""
    from tokenizers import Tokenizer as HfTokenizer

    from tinygpt.corpus import load_or_train_tokenizer
    from tinygpt.export.tokenizer_json import hf_tokenizer

    text = holmes_path.read_text(encoding="utf-8")
    tokenizer = load_or_train_tokenizer(text, 4096, cache_dir)
    (tmp_path / "tokenizer.json").write_text(json.dumps(hf_tokenizer(tokenizer)), encoding="utf-8")
    hf = HfTokenizer.from_file(str(tmp_path / "tokenizer.json"))
    ids = hf.encode(text).ids
    assert len(ids) == 1_033_352
    assert ids == tokenizer.encode(text)
    assert hf.decode(ids) == text


def test_a_mix_no_stock_class_holds_is_refused_before_any_file_is_written(trained, tmp_path):
    run = trained("modern", mlp="gelu")
    for format, out in (("hf", tmp_path / "hf"), ("gguf", tmp_path / "model.gguf")):
        with pytest.raises(ExportError, match=r"^no stock class holds pos rope, norm rmsnorm, mlp gelu; these "
                                              r"export: pos rope, norm rmsnorm, mlp swiglu without biases \(modern"):
            export(run, out, format=format)
        assert not out.exists()


def test_the_model_card_says_how_the_model_was_made(trained, tmp_path):
    run = trained("series")
    folder = export(run, tmp_path / "hf", format="hf")
    card = (folder / "README.md").read_text(encoding="utf-8")
    header = card.split("---\n")[1]
    assert '"library_name"' not in header and 'library_name: "transformers"' in header
    assert 'tags: ["tinygpt", "text-generation", "causal-lm", "gpt_neox"]' in header
    assert 'datasets: ["holmes-slice"]' in header
    _, _, state = load_model(run / "best.pt")
    assert f'"value": {round(state["best_val_loss"], 4)}' in header
    assert "| architecture | series (pos rope, norm layernorm, mlp gelu (series: GPTNeoXForCausalLM" in card
    assert "| steps | 4 |" in card and "| tokens seen | 1,024 |" in card  # 4 steps x 2 x 128 tokens
    assert "![Training and validation loss by step](loss_curve.svg)" in card
    shown = json.loads(card.split("```json\n")[1].split("```")[0])
    assert shown == {**state["train_config"], "corpus": "holmes-slice.txt"}  # the file's name, not its path
    assert "Prompt `'Holmes'`:" in card and "$" not in card.replace("$5", "")
    svg = (folder / "loss_curve.svg").read_text(encoding="utf-8")
    assert svg.startswith("<svg") and svg.count("<circle") == 3  # evaluations at steps 0, 2 and 4


def test_safetensors_keeps_our_names_the_configs_and_samples_like_the_checkpoint(trained, tmp_path, capsys):
    from safetensors import safe_open

    run = trained("modern")
    file = export(run, tmp_path / "model.safetensors", format="safetensors")
    ours, tokenizer, state = load_model(run / "best.pt")
    with safe_open(str(file), "pt") as f:
        meta = f.metadata()
        names = set(f.keys())
        assert torch.equal(f.get_tensor("tok_emb.weight"), ours.tok_emb.weight)
    assert "head.weight" not in names and names == set(ours.state_dict()) - {"head.weight"}
    assert json.loads(meta["model_config"]) == json.loads(json.dumps(state["model_config"]))
    assert json.loads(meta["tokenizer"]) == tokenizer.to_dict()
    texts = []
    for checkpoint in (run / "best.pt", file):
        assert main(["sample", str(checkpoint), "--max-tokens", "20", "--seed", "3"]) == 0
        texts.append(capsys.readouterr().out)
    assert texts[0] == texts[1] and len(texts[0]) > len("Holmes\n")


def test_tinygpt_export_writes_each_format_and_refuses_in_one_line(trained, tmp_path, capsys):
    run = trained("modern")
    assert main(["export", str(run), "--format", "hf", "--out", str(tmp_path / "hf")]) == 0
    assert {p.name for p in (tmp_path / "hf").iterdir()} == {
        "config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
        "README.md", "loss_curve.svg"}
    assert main(["export", str(run), "--format", "gguf", "--quant", "q8_0", "--out", str(tmp_path / "m.gguf")]) == 0
    assert (tmp_path / "m.gguf").read_bytes()[:4] == b"GGUF"
    capsys.readouterr()
    for argv, message in (
        (["--format", "hf", "--out", str(tmp_path / "x")], None),
        (["--format", "hf", "--quant", "q8_0", "--out", str(tmp_path / "y")],
         "--quant q8_0 applies to the gguf format only, not hf"),
    ):
        source = trained("modern", mlp="gelu") if message is None else run
        assert main(["export", str(source), *argv]) == 2
        error = capsys.readouterr().err
        assert error.count("\n") == 1
        assert error.startswith("tinygpt export: error: " + (message or "no stock class holds pos rope, norm "
                                                                          "rmsnorm, mlp gelu; these export: "))
