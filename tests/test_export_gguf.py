"""GGUF files read by llama.cpp itself (``llama-cpp-python``, every family) and by ``transformers``' GGUF loader
(the families it supports: Llama, GPT-2): the tokenizer gives our ids, the logits ours within a tolerance for the
number format, the file's metadata what llama.cpp expects."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import transformers
from llama_cpp import Llama  # the export-test extra (make test installs it)

import tinygpt.model
from tinygpt.checkpoint import load_model
from tinygpt.export import export

from .test_export import FAMILY_CASES, PROMPTS


@contextlib.contextmanager
def llama_cpp(file: Path, context: int) -> Iterator[Llama]:
    llm = Llama(str(file), n_ctx=max(context, 256), logits_all=True, verbose=False, n_threads=2)
    try:
        yield llm
    finally:
        llm.close()


def llama_cpp_logits(llm: Llama, ids: list[int]) -> np.ndarray:
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[: len(ids)])  # (T, vocab)


@contextlib.contextmanager
def llama_cpp_gelu(config) -> Iterator[None]:  # noqa: ANN001
    """Our model computing GELU as llama.cpp does for GPT-NeoX and GPT-2 (the tanh approximation), so that what is
    compared is the file, not the two formulas: they differ by up to 3e-3 in the logits of the series' model
    after 60 steps (the GELU through ggml's fp16 table), 1e-6 in these few-step models."""
    if config.mlp != "gelu":
        yield
        return
    exact = F.gelu
    tinygpt.model.F.gelu = lambda x: exact(x, approximate="tanh")
    try:
        yield
    finally:
        tinygpt.model.F.gelu = exact


def our_logits(model, ids: list[int]) -> np.ndarray:  # noqa: ANN001
    with torch.no_grad():
        return model(torch.tensor([ids]))[0][0].numpy()


@pytest.mark.parametrize("case", list(FAMILY_CASES))
def test_llama_cpp_reads_each_family_with_our_tokens_and_logits(trained, tmp_path, case, slice_path):
    arch, options, _ = FAMILY_CASES[case]
    run = trained(arch, **options)
    ours, tokenizer, _ = load_model(run / "best.pt")
    window = tokenizer.encode(slice_path.read_text(encoding="utf-8")[:4000])[: ours.config.context]
    for kind, tolerance in (("fp32", 1e-3), ("fp16", 1e-2), ("bf16", 5e-2)):
        file = export(run, tmp_path / f"{kind}.gguf", format="gguf", dtype=kind)
        with llama_cpp(file, ours.config.context) as llm:
            for text in PROMPTS:
                assert llm.tokenize(text.encode(), add_bos=False, special=False) == tokenizer.encode(text)
                assert llm.detokenize(tokenizer.encode(text)).decode() == text
            with llama_cpp_gelu(ours.config):
                np.testing.assert_allclose(llama_cpp_logits(llm, window), our_logits(ours, window), atol=tolerance,
                                           rtol=0, err_msg=kind)


def test_q8_0_agrees_with_our_model_on_the_next_token(trained, tmp_path, slice_path):
    """The share of positions where the q8_0 file's most likely next token is ours, over a context-long window
    per family; measured on the series' model after 60 steps: 99.4 % of 10,240 positions (README)."""
    for arch in ("modern", "series", "classic"):
        run = trained(arch)
        ours, tokenizer, _ = load_model(run / "best.pt")
        window = tokenizer.encode(slice_path.read_text(encoding="utf-8")[-4000:])[: ours.config.context]
        file = export(run, tmp_path / f"{arch}.gguf", format="gguf", quant="q8_0")
        assert file.stat().st_size < 0.5 * export(run, tmp_path / "f32.gguf", format="gguf").stat().st_size
        with llama_cpp(file, ours.config.context) as llm:
            theirs = llama_cpp_logits(llm, window)
        agreement = float((theirs.argmax(-1) == our_logits(ours, window).argmax(-1)).mean())
        assert agreement >= 0.95, f"{arch}: q8_0 agrees on {agreement:.1%} of next tokens"


@pytest.mark.parametrize("case", ["modern", "classic", "modern-untied", "classic-untied"])
def test_transformers_gguf_loader_reads_llama_and_gpt2_files(trained, tmp_path, case):
    arch, options, hf_class = FAMILY_CASES[case]
    run = trained(arch, **options)
    ours, tokenizer, _ = load_model(run / "best.pt")
    export(run, tmp_path / "model.gguf", format="gguf")
    # transformers maps GGUF's context_length onto GPT-2's n_ctx only, leaving n_positions (the size of its
    # position table) at 1024: say it, as any reader of a GPT-2 GGUF of another context must
    fix = {"n_positions": ours.config.context} if arch == "classic" else {}
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="model.gguf", **fix).eval()
    assert type(model).__name__ == hf_class
    for text in PROMPTS:
        ids = tokenizer.encode(text)
        with torch.no_grad():
            theirs = model(torch.tensor([ids])).logits[0].numpy()
        with llama_cpp_gelu(ours.config):
            np.testing.assert_allclose(theirs, our_logits(ours, ids), atol=1e-3, rtol=0)


def test_the_gguf_metadata_is_what_llama_cpp_reads_for_the_family(trained, tmp_path):
    import gguf

    run = trained("series")
    ours, tokenizer, _ = load_model(run / "best.pt")
    reader = gguf.GGUFReader(export(run, tmp_path / "m.gguf", format="gguf", quant="q8_0"))
    fields = {name: field.contents() for name, field in reader.fields.items()}
    c = ours.config
    assert fields["general.architecture"] == "gptneox"
    assert {k: fields[f"gptneox.{k}"] for k in ("context_length", "embedding_length", "block_count",
                                                 "feed_forward_length", "attention.head_count",
                                                 "rope.dimension_count", "use_parallel_residual")} == {
        "context_length": c.context, "embedding_length": c.d_model, "block_count": c.n_layers,
        "feed_forward_length": c.mlp_hidden, "attention.head_count": c.n_heads, "rope.dimension_count": c.head_dim,
        "use_parallel_residual": False}
    assert fields["tokenizer.ggml.model"] == "gpt2" and fields["tokenizer.ggml.pre"] == "gpt-2"
    assert len(fields["tokenizer.ggml.tokens"]) == c.vocab_size
    assert fields["general.file_type"] == gguf.LlamaFileType.MOSTLY_Q8_0
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    assert types["blk.0.attn_qkv.weight"] == "Q8_0" and types["blk.0.attn_norm.bias"] == "F32"
    assert types["output.weight"] == "Q8_0"  # llama.cpp's GPT-NeoX always reads an output head (tied: a copy)
