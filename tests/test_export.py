"""Exports checked against readers nobody here wrote: ``transformers`` loads the folder ``tinygpt.export``
writes and computes our logits; ``tokenizers`` encodes text to our ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers  # the export-test extra (make test installs it)

from tinygpt.checkpoint import load_model
from tinygpt.export import ExportError, export_hf, export_safetensors
from tinygpt.train import Trainer

PROMPTS = ["Holmes", "It is a capital mistake to theorize", "\n\n  Watson, 1891: £5!"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, slice_path, cache_dir):  # noqa: ANN201
    """Run folders of a few steps per architecture (no weight left at its initial value)."""
    from tinygpt.run_config import TrainConfig

    runs: dict[str, Path] = {}

    def train(arch: str, **options: object) -> Path:
        key = json.dumps([arch, options], sort_keys=True)
        if key not in runs:
            runs[key] = tmp_path_factory.mktemp(arch)
            config = TrainConfig(preset="tiny", arch=arch, corpus=str(slice_path), device="cpu", precision="fp32",
                                 steps=6, batch_size=4, eval_every=3, eval_batches=1, vocab_size=512,
                                 sample_tokens=0, seed=5, **options)
            Trainer(config, runs[key], cache_dir=cache_dir).run()
        return runs[key]

    return train


def our_logits(model, tokenizer, text: str) -> torch.Tensor:  # noqa: ANN001
    ids = torch.tensor([tokenizer.encode(text)])
    with torch.no_grad():
        return model(ids)[0][0]  # (T, vocab)


@pytest.mark.parametrize("options", [{}, {"untied_head": True}], ids=["tied", "untied"])
def test_transformers_loads_the_modern_model_and_computes_our_logits(trained, tmp_path, options):
    run = trained("modern", **options)
    folder = export_hf(run, tmp_path / "hf")
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    assert type(model).__name__ == "LlamaForCausalLM"
    ours, tokenizer, _ = load_model(run / "best.pt")
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    for text in PROMPTS:
        ids = hf_tokenizer(text)["input_ids"]
        assert ids == tokenizer.encode(text)
        with torch.no_grad():
            theirs = model(torch.tensor([ids])).logits[0]
        torch.testing.assert_close(theirs, our_logits(ours, tokenizer, text), atol=1e-4, rtol=0)


def test_the_exported_tokenizer_encodes_the_corpus_to_our_ids_and_back(trained, tmp_path, slice_path):
    from tokenizers import Tokenizer as HfTokenizer

    run = trained("modern")
    folder = export_hf(run, tmp_path / "hf")
    _, tokenizer, _ = load_model(run / "best.pt")
    hf = HfTokenizer.from_file(str(folder / "tokenizer.json"))
    text = slice_path.read_text(encoding="utf-8")
    ids = hf.encode(text).ids
    assert ids == tokenizer.encode(text)
    assert hf.decode(ids) == text


def test_a_mix_no_stock_class_holds_is_refused_before_any_file_is_written(trained, tmp_path):
    run = trained("modern", mlp="gelu")
    with pytest.raises(ExportError, match=r"^no stock transformers class holds pos rope, norm rmsnorm, mlp gelu; "
                                          r"these export: "):
        export_hf(run, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_safetensors_keeps_our_names_and_the_configs_as_metadata(trained, tmp_path):
    from safetensors import safe_open

    run = trained("modern")
    file = export_safetensors(run, tmp_path / "model.safetensors")
    ours, tokenizer, state = load_model(run / "best.pt")
    with safe_open(str(file), "pt") as f:
        meta = f.metadata()
        names = set(f.keys())
        assert torch.equal(f.get_tensor("tok_emb.weight"), ours.tok_emb.weight)
    assert "head.weight" not in names and names == set(ours.state_dict()) - {"head.weight"}
    assert json.loads(meta["model_config"]) == json.loads(json.dumps(state["model_config"]))
    assert json.loads(meta["tokenizer"]) == tokenizer.to_dict()


def test_tinygpt_export_writes_the_folder_and_refuses_a_mix_in_one_line(trained, tmp_path, capsys):
    from tinygpt.cli import main

    assert main(["export", str(trained("modern")), "--format", "hf", "--out", str(tmp_path / "hf")]) == 0
    assert (tmp_path / "hf" / "model.safetensors").is_file() and (tmp_path / "hf" / "tokenizer.json").is_file()
    assert main(["export", str(trained("modern", mlp="gelu")), "--format", "hf", "--out", str(tmp_path / "x")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("tinygpt export: error: no stock transformers class holds pos rope, norm rmsnorm, mlp "
                            "gelu; these export: ") and error.count("\n") == 1
