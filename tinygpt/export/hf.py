"""A Hugging Face ``transformers`` folder that ``AutoModelForCausalLM`` and ``AutoTokenizer`` load without
``trust_remote_code``: our weights under the stock class's names, its ``config.json`` written by hand (exporting
needs no ``transformers``), ``tokenizer.json`` in the ``tokenizers`` format, and a model card."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from safetensors.torch import save_file

from ..config import GPTConfig
from ..device import DTYPES
from ..model import LAYER_NORM_EPS, RMS_NORM_EPS
from .card import write_card
from .families import Family, family_of
from .source import ExportSource, Weights, bias_or_zeros, cast, heads_interleaved_qkv, read_source
from .tokenizer_json import hf_tokenizer


def layer_norm(weights: Weights, ours: str, theirs: str, size: int) -> Weights:
    return {f"{theirs}.weight": weights[f"{ours}.weight"], f"{theirs}.bias": bias_or_zeros(weights, f"{ours}.bias", size)}


def llama_weights(weights: Weights, config: GPTConfig) -> Weights:
    """Under ``LlamaForCausalLM``'s names: the fused qkv split into q, k and v (rows: 3 x heads x head_dim), the
    tied head left out (the config ties it)."""
    d = config.d_model
    out = {"model.embed_tokens.weight": weights["tok_emb.weight"], "model.norm.weight": weights["norm_f.weight"]}
    if config.untied_head:
        out["lm_head.weight"] = weights["head.weight"]
    for i in range(config.n_layers):
        ours, theirs = f"blocks.{i}.", f"model.layers.{i}."
        q, k, v = weights[ours + "attn.qkv.weight"].split(d)  # (d, d) each
        out.update({
            theirs + "input_layernorm.weight": weights[ours + "norm1.weight"],
            theirs + "self_attn.q_proj.weight": q,
            theirs + "self_attn.k_proj.weight": k,
            theirs + "self_attn.v_proj.weight": v,
            theirs + "self_attn.o_proj.weight": weights[ours + "attn.proj.weight"],
            theirs + "post_attention_layernorm.weight": weights[ours + "norm2.weight"],
            theirs + "mlp.gate_proj.weight": weights[ours + "mlp.gate.weight"],
            theirs + "mlp.up_proj.weight": weights[ours + "mlp.up.weight"],
            theirs + "mlp.down_proj.weight": weights[ours + "mlp.down.weight"],
        })
    return out


def neox_weights(weights: Weights, config: GPTConfig) -> Weights:
    """Under ``GPTNeoXForCausalLM``'s names: qkv rows per head (heads x 3 x head_dim), the MLP's and norms' biases
    zero where we have none; attention biases only with ``attn_bias`` (the config says which)."""
    d, hidden = config.d_model, config.mlp_hidden
    out = {"gpt_neox.embed_in.weight": weights["tok_emb.weight"],
           **layer_norm(weights, "norm_f", "gpt_neox.final_layer_norm", d)}
    if config.untied_head:
        out["embed_out.weight"] = weights["head.weight"]
    for i in range(config.n_layers):
        ours, theirs = f"blocks.{i}.", f"gpt_neox.layers.{i}."
        out.update(layer_norm(weights, ours + "norm1", theirs + "input_layernorm", d))
        out.update(layer_norm(weights, ours + "norm2", theirs + "post_attention_layernorm", d))
        out[theirs + "attention.query_key_value.weight"] = heads_interleaved_qkv(weights[ours + "attn.qkv.weight"], config)
        out[theirs + "attention.dense.weight"] = weights[ours + "attn.proj.weight"]
        if config.attn_bias:
            out[theirs + "attention.query_key_value.bias"] = heads_interleaved_qkv(weights[ours + "attn.qkv.bias"], config)
            out[theirs + "attention.dense.bias"] = weights[ours + "attn.proj.bias"]
        out[theirs + "mlp.dense_h_to_4h.weight"] = weights[ours + "mlp.up.weight"]
        out[theirs + "mlp.dense_h_to_4h.bias"] = bias_or_zeros(weights, ours + "mlp.up.bias", hidden)
        out[theirs + "mlp.dense_4h_to_h.weight"] = weights[ours + "mlp.down.weight"]
        out[theirs + "mlp.dense_4h_to_h.bias"] = bias_or_zeros(weights, ours + "mlp.down.bias", d)
    return out


def gpt2_weights(weights: Weights, config: GPTConfig) -> Weights:
    """Under ``GPT2LMHeadModel``'s names: its ``Conv1D`` layers hold the transposes of our linear weights
    (in x out), every bias present (zeros where we have none)."""
    d, hidden = config.d_model, config.mlp_hidden
    out = {"transformer.wte.weight": weights["tok_emb.weight"], "transformer.wpe.weight": weights["pos_emb.weight"],
           **layer_norm(weights, "norm_f", "transformer.ln_f", d)}
    if config.untied_head:
        out["lm_head.weight"] = weights["head.weight"]
    for i in range(config.n_layers):
        ours, theirs = f"blocks.{i}.", f"transformer.h.{i}."
        out.update(layer_norm(weights, ours + "norm1", theirs + "ln_1", d))
        out.update(layer_norm(weights, ours + "norm2", theirs + "ln_2", d))
        for mine, conv, size in (("attn.qkv", "attn.c_attn", 3 * d), ("attn.proj", "attn.c_proj", d),
                                 ("mlp.up", "mlp.c_fc", hidden), ("mlp.down", "mlp.c_proj", d)):
            out[f"{theirs}{conv}.weight"] = weights[f"{ours}{mine}.weight"].t()  # (in, out)
            out[f"{theirs}{conv}.bias"] = bias_or_zeros(weights, f"{ours}{mine}.bias", size)
    return out


def llama_config(config: GPTConfig) -> dict:
    return {
        "vocab_size": config.vocab_size, "hidden_size": config.d_model, "intermediate_size": config.mlp_hidden,
        "num_hidden_layers": config.n_layers, "num_attention_heads": config.n_heads,
        "num_key_value_heads": config.n_heads, "head_dim": config.head_dim, "hidden_act": "silu",
        "max_position_embeddings": config.context, "rms_norm_eps": RMS_NORM_EPS,
        "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_base},
        "attention_bias": False, "mlp_bias": False, "attention_dropout": 0.0,
    }


def neox_config(config: GPTConfig) -> dict:
    return {
        "vocab_size": config.vocab_size, "hidden_size": config.d_model, "intermediate_size": config.mlp_hidden,
        "num_hidden_layers": config.n_layers, "num_attention_heads": config.n_heads, "hidden_act": "gelu",
        "max_position_embeddings": config.context, "layer_norm_eps": LAYER_NORM_EPS,
        "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_base, "partial_rotary_factor": 1.0},
        "use_parallel_residual": False, "attention_bias": config.attn_bias,
        "attention_dropout": 0.0, "hidden_dropout": 0.0,
    }


def gpt2_config(config: GPTConfig) -> dict:
    return {
        "vocab_size": config.vocab_size, "n_embd": config.d_model, "n_layer": config.n_layers,
        "n_head": config.n_heads, "n_positions": config.context, "n_inner": config.mlp_hidden,
        "activation_function": "gelu", "layer_norm_epsilon": LAYER_NORM_EPS,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "scale_attn_weights": True,
    }


#: Per family: our weights under its names, and its config.json's own keys.
HF_WRITERS: dict[str, tuple[Callable[[Weights, GPTConfig], Weights], Callable[[GPTConfig], dict]]] = {
    "llama": (llama_weights, llama_config),
    "gpt_neox": (neox_weights, neox_config),
    "gpt2": (gpt2_weights, gpt2_config),
}


def hf_config(family: Family, config: GPTConfig, dtype: str) -> dict:
    """``config.json``: the family's keys, and what every family shares."""
    return {
        "architectures": [family.hf_class], "model_type": family.name, **HF_WRITERS[family.name][1](config),
        "tie_word_embeddings": not config.untied_head, "dtype": str(DTYPES[dtype]).removeprefix("torch."),
        "bos_token_id": None, "eos_token_id": None, "pad_token_id": None, "use_cache": True,
    }


def hf_weights(source: ExportSource) -> tuple[Family, Weights]:
    family = family_of(source.config)
    return family, HF_WRITERS[family.name][0](source.weights, source.config)


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def export_hf(source: str | Path | ExportSource, out: str | Path, *, dtype: str = "fp32") -> Path:
    """A ``transformers`` folder: config.json, model.safetensors, generation_config.json, tokenizer.json,
    tokenizer_config.json and the model card (README.md, loss_curve.svg). Refused (ExportError) before anything
    is written when no stock class holds the architecture."""
    source = source if isinstance(source, ExportSource) else read_source(source)
    family, weights = hf_weights(source)  # refused here, before anything is written
    tokenizer_json = hf_tokenizer(source.tokenizer)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    save_file(cast(weights, dtype), str(out / "model.safetensors"), metadata={"format": "pt"})
    write_json(out / "config.json", hf_config(family, source.config, dtype))
    write_json(out / "generation_config.json", {"bos_token_id": None, "eos_token_id": None, "pad_token_id": None})
    write_json(out / "tokenizer.json", tokenizer_json)
    write_json(out / "tokenizer_config.json", {"tokenizer_class": "PreTrainedTokenizerFast",
                                               "model_max_length": source.config.context,
                                               "clean_up_tokenization_spaces": False})
    write_card(source, family, out)
    return out

