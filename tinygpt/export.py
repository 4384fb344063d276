"""Take the model home: a checkpoint as plain safetensors, or as a Hugging Face ``transformers`` folder that
``AutoModelForCausalLM`` and ``AutoTokenizer`` load without ``trust_remote_code``.

Each architecture maps onto a stock class (:data:`HF_CLASSES`); a mix no stock class holds is refused before
any file is written (:func:`hf_family`). Only ``safetensors`` is needed here: the readers (``transformers``,
``tokenizers``) are the tests' (tests/test_export.py), so that what is checked was written by nobody here.

>>> hf_family(GPTConfig(pos="rope", norm="rmsnorm", mlp="swiglu", bias=False))
'llama'
>>> hf_family(GPTConfig(pos="rope", norm="rmsnorm", mlp="gelu", bias=False))
Traceback (most recent call last):
...
tinygpt.export.ExportError: no stock transformers class holds pos rope, norm rmsnorm, mlp gelu; these export: pos rope, norm rmsnorm, mlp swiglu without biases (modern: LlamaForCausalLM)
"""

from __future__ import annotations

import json
from dataclasses import asdict
from functools import cache
from pathlib import Path

import torch
from safetensors.torch import save_file

from .checkpoint import checked_parts, read_checkpoint
from .config import GPTConfig
from .device import DTYPES
from .model import RMS_NORM_EPS
from .tokenizer import SPLIT_PATTERN, Tokenizer

#: The stock ``transformers`` class of each architecture family: (pos, norm, mlp, biases) -> family.
HF_CLASSES = {"llama": "LlamaForCausalLM"}
FAMILIES = {("rope", "rmsnorm", "swiglu", False): "llama"}
FAMILY_TEXT = {"llama": "pos rope, norm rmsnorm, mlp swiglu without biases (modern: LlamaForCausalLM)"}


class ExportError(ValueError):
    """A model this format cannot hold, or a checkpoint that cannot be exported; the message says which."""


def hf_family(config: GPTConfig) -> str:
    """The stock family that holds this architecture, or ExportError naming the mix and those that export."""
    if config.qk_norm:
        raise ExportError("no stock transformers class holds qk_norm (per-head query and key norms without "
                          "weights); these export: " + "; ".join(FAMILY_TEXT.values()))
    family = FAMILIES.get((config.pos, config.norm, config.mlp, config.bias or config.attn_bias))
    if family is None:
        raise ExportError(f"no stock transformers class holds pos {config.pos}, norm {config.norm}, mlp "
                          f"{config.mlp}{' with biases' if config.bias or config.attn_bias else ''}; these "
                          "export: " + "; ".join(FAMILY_TEXT.values()))
    return family


def llama_weights(state: dict[str, torch.Tensor], config: GPTConfig) -> dict[str, torch.Tensor]:
    """Our weights under ``LlamaForCausalLM``'s names: the fused qkv split into q, k and v (rows: 3 x heads x
    head_dim), the tied head left out (the config ties it)."""
    d = config.d_model
    out = {"model.embed_tokens.weight": state["tok_emb.weight"], "model.norm.weight": state["norm_f.weight"]}
    if config.untied_head:
        out["lm_head.weight"] = state["head.weight"]
    for i in range(config.n_layers):
        ours, theirs = f"blocks.{i}.", f"model.layers.{i}."
        q, k, v = state[ours + "attn.qkv.weight"].split(d)  # (d, d) each
        out.update({
            theirs + "input_layernorm.weight": state[ours + "norm1.weight"],
            theirs + "self_attn.q_proj.weight": q,
            theirs + "self_attn.k_proj.weight": k,
            theirs + "self_attn.v_proj.weight": v,
            theirs + "self_attn.o_proj.weight": state[ours + "attn.proj.weight"],
            theirs + "post_attention_layernorm.weight": state[ours + "norm2.weight"],
            theirs + "mlp.gate_proj.weight": state[ours + "mlp.gate.weight"],
            theirs + "mlp.up_proj.weight": state[ours + "mlp.up.weight"],
            theirs + "mlp.down_proj.weight": state[ours + "mlp.down.weight"],
        })
    return out


def llama_config(config: GPTConfig, dtype: str) -> dict:
    """``config.json`` of a ``LlamaForCausalLM`` with our shape (written by hand: exporting needs no
    ``transformers``)."""
    return {
        "architectures": [HF_CLASSES["llama"]], "model_type": "llama", "vocab_size": config.vocab_size,
        "hidden_size": config.d_model, "intermediate_size": config.mlp_hidden,
        "num_hidden_layers": config.n_layers, "num_attention_heads": config.n_heads,
        "num_key_value_heads": config.n_heads, "head_dim": config.head_dim, "hidden_act": "silu",
        "max_position_embeddings": config.context, "rms_norm_eps": RMS_NORM_EPS,
        "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_base},
        "attention_bias": False, "mlp_bias": False, "attention_dropout": 0.0,
        "tie_word_embeddings": not config.untied_head, "dtype": str(DTYPES[dtype]).removeprefix("torch."),
        "bos_token_id": None, "eos_token_id": None, "pad_token_id": None, "use_cache": True,
    }


@cache
def byte_chars() -> tuple[str, ...]:
    """GPT-2's printable stand-in for each byte, the alphabet of a byte-level BPE in ``tokenizers``: printable
    bytes stand for themselves, the others for the characters from U+0100 on, in order.

    >>> byte_chars()[ord("a")], byte_chars()[ord(" ")], byte_chars()[0]
    ('a', 'Ġ', 'Ā')
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return tuple(chars[b] for b in range(256))


def token_text(token: bytes) -> str:
    return "".join(byte_chars()[b] for b in token)


def hf_tokenizer(tokenizer: Tokenizer) -> dict:
    """``tokenizer.json`` in the ``tokenizers`` library's format: our pre-split pattern, then bytes as GPT-2's
    byte characters, our ids and merges in their ranks (BPE applies the lowest rank first, as we do)."""
    texts = [token_text(t) for t in tokenizer.vocab]
    if len(set(texts)) != len(texts):
        raise ExportError("the tokenizer has two ids for the same bytes, which a tokenizer.json cannot hold")
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": SPLIT_PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {text: i for i, text in enumerate(texts)},
                  "merges": [[texts[a], texts[b]] for a, b in tokenizer.merges]},
    }


def load_checkpoint_parts(path: str | Path) -> tuple[dict[str, torch.Tensor], GPTConfig, Tokenizer, dict]:
    """A checkpoint file, or a run folder's ``best.pt``: its weights, model config, tokenizer and state, each
    checked before use (:func:`tinygpt.checkpoint.checked_parts`)."""
    path = Path(path)
    file = path / "best.pt" if path.is_dir() else path
    state = read_checkpoint(file)
    config, tokenizer = checked_parts(state, file)
    return state["model"], config, tokenizer, state


def cast(weights: dict[str, torch.Tensor], dtype: str) -> dict[str, torch.Tensor]:
    """Each weight contiguous, in its own memory (safetensors stores no shared or strided tensors), as ``dtype``."""
    return {name: w.detach().to(DTYPES[dtype]).contiguous().clone() for name, w in weights.items()}


def export_safetensors(source: str | Path, out: str | Path, *, dtype: str = "fp32") -> Path:
    """Our weights under our own names (the tied head once, as ``tok_emb.weight``) with the model config, the
    tokenizer and the run's options as text metadata: for people who load them into their own code."""
    weights, config, tokenizer, state = load_checkpoint_parts(source)
    weights = {k: v for k, v in weights.items() if config.untied_head or k != "head.weight"}
    metadata = {"format": "tinygpt", "model_config": json.dumps(asdict(config)),
                "tokenizer": json.dumps(tokenizer.to_dict()), "train_config": json.dumps(state.get("train_config", {})),
                "step": str(state.get("step", "")), "best_val_loss": str(state.get("best_val_loss", ""))}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file(cast(weights, dtype), str(out), metadata=metadata)
    return out


def export_hf(source: str | Path, out: str | Path, *, dtype: str = "fp32") -> Path:
    """A ``transformers`` folder: config.json, model.safetensors, generation_config.json, tokenizer.json and
    tokenizer_config.json. Refused (ExportError) before anything is written when no stock class holds the
    architecture."""
    weights, config, tokenizer, _ = load_checkpoint_parts(source)
    hf_family(config)  # refused here, before anything is written (llama is the one family so far)
    tokenizer_json = hf_tokenizer(tokenizer)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    save_file(cast(llama_weights(weights, config), dtype), str(out / "model.safetensors"), metadata={"format": "pt"})
    files = {
        "config.json": llama_config(config, dtype),
        "generation_config.json": {"bos_token_id": None, "eos_token_id": None, "pad_token_id": None},
        "tokenizer.json": tokenizer_json,
        "tokenizer_config.json": {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": config.context,
                                  "clean_up_tokenization_spaces": False},
    }
    for name, data in files.items():
        (out / name).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return out
