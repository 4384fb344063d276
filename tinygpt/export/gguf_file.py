"""A GGUF file for llama.cpp (and Ollama, LM Studio, ``transformers``' GGUF loader), written with the ``gguf``
package, the format's own writer: tensor names from its tables, the hyperparameters and the ``gpt2`` (byte-level
BPE) tokenizer as llama.cpp reads them for the family's architecture.

Conventions kept from llama.cpp's own converter (convert_hf_to_gguf.py): Llama's query and key rows are permuted
from the half-split rotary layout to llama.cpp's interleaved one; GPT-NeoX keeps qkv fused (3 x heads x
head_dim, our order) and always has an ``output`` tensor; 1-D tensors (norms, biases) stay fp32 whatever the
dtype; q8_0 quantizes the 2-D weights whose rows are a whole number of 32-value blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
import torch

from ..config import GPTConfig
from ..model import LAYER_NORM_EPS, RMS_NORM_EPS
from .families import Family, family_of
from .source import ExportSource, Weights, bias_or_zeros, read_source
from .tokenizer_json import merge_pairs, token_texts

T = gguf.MODEL_TENSOR
FILE_TYPES = {"fp32": gguf.LlamaFileType.ALL_F32, "fp16": gguf.LlamaFileType.MOSTLY_F16,
              "bf16": gguf.LlamaFileType.MOSTLY_BF16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}
TENSOR_TYPES = {"fp32": gguf.GGMLQuantizationType.F32, "fp16": gguf.GGMLQuantizationType.F16,
                "bf16": gguf.GGMLQuantizationType.BF16, "q8_0": gguf.GGMLQuantizationType.Q8_0}


def tensor_name(kind: gguf.MODEL_TENSOR, suffix: str = "weight", layer: int | None = None) -> str:
    """The format's name for a tensor (``gguf.TENSOR_NAMES``).

    >>> tensor_name(T.ATTN_QKV, "bias", 3), tensor_name(T.TOKEN_EMBD)
    ('blk.3.attn_qkv.bias', 'token_embd.weight')
    """
    return f"{gguf.TENSOR_NAMES[kind].format(bid=layer)}.{suffix}"


def interleaved_rotary(rows: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Query or key rows from the half-split rotary layout (ours, transformers') to llama.cpp's interleaved pairs,
    as its converter does for Llama.

    >>> interleaved_rotary(torch.arange(4.0), 1).tolist()  # one head of 4: (0, 2) and (1, 3) turn together
    [0.0, 2.0, 1.0, 3.0]
    """
    return rows.reshape(n_heads, 2, rows.shape[0] // n_heads // 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def layer_norm(weights: Weights, ours: str, kind: gguf.MODEL_TENSOR, size: int, layer: int | None = None) -> Weights:
    return {tensor_name(kind, "weight", layer): weights[f"{ours}.weight"],
            tensor_name(kind, "bias", layer): bias_or_zeros(weights, f"{ours}.bias", size)}


def llama_tensors(weights: Weights, config: GPTConfig) -> Weights:
    d = config.d_model
    out = {tensor_name(T.TOKEN_EMBD): weights["tok_emb.weight"], tensor_name(T.OUTPUT_NORM): weights["norm_f.weight"]}
    if config.untied_head:
        out[tensor_name(T.OUTPUT)] = weights["head.weight"]
    for i in range(config.n_layers):
        ours = f"blocks.{i}."
        q, k, v = weights[ours + "attn.qkv.weight"].split(d)  # (d, d) each
        out.update({
            tensor_name(T.ATTN_NORM, layer=i): weights[ours + "norm1.weight"],
            tensor_name(T.ATTN_Q, layer=i): interleaved_rotary(q, config.n_heads),
            tensor_name(T.ATTN_K, layer=i): interleaved_rotary(k, config.n_heads),
            tensor_name(T.ATTN_V, layer=i): v,
            tensor_name(T.ATTN_OUT, layer=i): weights[ours + "attn.proj.weight"],
            tensor_name(T.FFN_NORM, layer=i): weights[ours + "norm2.weight"],
            tensor_name(T.FFN_GATE, layer=i): weights[ours + "mlp.gate.weight"],
            tensor_name(T.FFN_UP, layer=i): weights[ours + "mlp.up.weight"],
            tensor_name(T.FFN_DOWN, layer=i): weights[ours + "mlp.down.weight"],
        })
    return out


def layer_norm_family_tensors(weights: Weights, config: GPTConfig, *, output_always: bool) -> Weights:
    """GPT-NeoX's and GPT-2's tensors (the same names in llama.cpp): every bias present, zeros where we have
    none (llama.cpp requires them)."""
    d, hidden = config.d_model, config.mlp_hidden
    out = {tensor_name(T.TOKEN_EMBD): weights["tok_emb.weight"], **layer_norm(weights, "norm_f", T.OUTPUT_NORM, d)}
    if config.pos == "learned":
        out[tensor_name(T.POS_EMBD)] = weights["pos_emb.weight"]
    if config.untied_head or output_always:
        out[tensor_name(T.OUTPUT)] = weights["head.weight" if config.untied_head else "tok_emb.weight"]
    for i in range(config.n_layers):
        ours = f"blocks.{i}."
        out.update(layer_norm(weights, ours + "norm1", T.ATTN_NORM, d, i))
        out.update(layer_norm(weights, ours + "norm2", T.FFN_NORM, d, i))
        for mine, kind, size in (("attn.qkv", T.ATTN_QKV, 3 * d), ("attn.proj", T.ATTN_OUT, d),
                                 ("mlp.up", T.FFN_UP, hidden), ("mlp.down", T.FFN_DOWN, d)):
            out[tensor_name(kind, layer=i)] = weights[f"{ours}{mine}.weight"]
            out[tensor_name(kind, "bias", i)] = bias_or_zeros(weights, f"{ours}{mine}.bias", size)
    return out


def llama_hparams(writer: gguf.GGUFWriter, config: GPTConfig) -> None:
    writer.add_head_count_kv(config.n_heads)
    writer.add_rope_dimension_count(config.head_dim)
    writer.add_rope_freq_base(config.rope_base)
    writer.add_layer_norm_rms_eps(RMS_NORM_EPS)
    writer.add_vocab_size(config.vocab_size)


def neox_hparams(writer: gguf.GGUFWriter, config: GPTConfig) -> None:
    writer.add_rope_dimension_count(config.head_dim)  # full rotary
    writer.add_rope_freq_base(config.rope_base)
    writer.add_parallel_residual(False)
    writer.add_layer_norm_eps(LAYER_NORM_EPS)


def gpt2_hparams(writer: gguf.GGUFWriter, config: GPTConfig) -> None:
    writer.add_layer_norm_eps(LAYER_NORM_EPS)


#: Per family: its tensors under the format's names, and its own hyperparameters.
GGUF_WRITERS: dict[str, tuple[Callable[[Weights, GPTConfig], Weights], Callable[[gguf.GGUFWriter, GPTConfig], None]]] = {
    "llama": (llama_tensors, llama_hparams),
    "gpt_neox": (lambda w, c: layer_norm_family_tensors(w, c, output_always=True), neox_hparams),
    "gpt2": (lambda w, c: layer_norm_family_tensors(w, c, output_always=False), gpt2_hparams),
}


def encoded(tensor: torch.Tensor, kind: str) -> tuple[np.ndarray, gguf.GGMLQuantizationType]:
    """A tensor as the file stores it: 1-D ones fp32; 2-D ones as ``kind`` (q8_0 only where each row is whole
    32-value blocks, otherwise fp16)."""
    data = tensor.detach().float().contiguous().numpy()
    if data.ndim == 1 or kind == "fp32":
        return data, TENSOR_TYPES["fp32"]
    if kind == "q8_0" and data.shape[-1] % gguf.GGML_QUANT_SIZES[TENSOR_TYPES["q8_0"]][0]:
        kind = "fp16"
    if kind == "fp16":
        return data.astype(np.float16), TENSOR_TYPES["fp16"]
    return gguf.quants.quantize(data, TENSOR_TYPES[kind]), TENSOR_TYPES[kind]


def add_tokenizer(writer: gguf.GGUFWriter, source: ExportSource, texts: list[str]) -> None:
    """Our byte-level BPE as GGUF's ``gpt2`` tokenizer model with GPT-2's pre-split (ours is GPT-2's pattern);
    no special tokens, none added. Rows of the embedding past the tokenizer's ids (a corpus too small for every
    merge) get unused placeholder tokens: llama.cpp wants one token per row."""
    unused = [f"<unused{i}>" for i in range(len(texts), source.config.vocab_size)]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(texts + unused)
    writer.add_token_types([gguf.TokenType.NORMAL] * len(texts) + [gguf.TokenType.UNUSED] * len(unused))
    writer.add_token_merges([f"{a} {b}" for a, b in merge_pairs(source.tokenizer, texts)])
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)


def gguf_tensors(source: ExportSource) -> tuple[Family, Weights]:
    family = family_of(source.config)
    return family, GGUF_WRITERS[family.name][0](source.weights, source.config)


def export_gguf(source: str | Path | ExportSource, out: str | Path, *, dtype: str = "fp32",
                quant: str | None = None) -> Path:
    """One ``.gguf`` file: the family's architecture and hyperparameters, the tokenizer, the tensors as
    ``dtype`` (or ``quant``). Refused (ExportError) before anything is written when no family holds the model."""
    source = source if isinstance(source, ExportSource) else read_source(source)
    family, tensors = gguf_tensors(source)
    texts = token_texts(source.tokenizer)  # refused here too, before the file exists
    config, kind = source.config, quant or dtype
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(out), family.gguf_arch)
    writer.add_name(f"tinygpt {source.folder.name}")
    writer.add_context_length(config.context)
    writer.add_embedding_length(config.d_model)
    writer.add_block_count(config.n_layers)
    writer.add_feed_forward_length(config.mlp_hidden)
    writer.add_head_count(config.n_heads)
    GGUF_WRITERS[family.name][1](writer, config)
    writer.add_file_type(FILE_TYPES[kind])
    if quant:
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    add_tokenizer(writer, source, texts)
    for name, tensor in tensors.items():
        data, tensor_type = encoded(tensor, kind)
        writer.add_tensor(name, data, raw_dtype=tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
