"""Model presets: sizes x architectures, as data that the CLI, the form and the API list.

>>> model_config("holmes").d_model
256
>>> model_config("tiny", "classic").pos
'learned'
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from .model import GPT, GPTConfig

#: Architecture switches. ``series`` is the tiny-GPT series' mix (RoPE with LayerNorm and GELU,
#: biases in the MLP and norms but not in attention); ``classic`` is GPT-2 style; ``modern`` is
#: Llama style.
ARCHS: dict[str, dict] = {
    "series": {"pos": "rope", "norm": "layernorm", "mlp": "gelu", "bias": True, "attn_bias": False},
    "classic": {"pos": "learned", "norm": "layernorm", "mlp": "gelu", "bias": True, "attn_bias": True},
    "modern": {"pos": "rope", "norm": "rmsnorm", "mlp": "swiglu", "bias": False, "attn_bias": False},
}


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    default_arch: str
    size: dict
    training: dict  # suggested steps, batch size and evaluation interval (the form fills them in)


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "holmes",
            "The series' model: 5.8M parameters, 6 layers of 256, context 256.",
            "series",
            {"vocab_size": 4096, "d_model": 256, "n_heads": 4, "n_layers": 6, "context": 256, "dropout": 0.1},
            {"steps": 1500, "batch_size": 32, "eval_every": 250},
        ),
        Preset(
            "tiny",
            "A smoke-test model: about half a million parameters, trains in minutes on any CPU.",
            "modern",
            {"vocab_size": 4096, "d_model": 64, "n_heads": 4, "n_layers": 4, "context": 128, "dropout": 0.0},
            {"steps": 300, "batch_size": 16, "eval_every": 50},
        ),
        Preset(
            "student",
            "About 2.6M parameters: learns readable words in a laptop-CPU half hour.",
            "modern",
            {"vocab_size": 4096, "d_model": 192, "n_heads": 6, "n_layers": 4, "context": 256, "dropout": 0.1},
            {"steps": 1000, "batch_size": 32, "eval_every": 100},
        ),
        Preset(
            "small",
            "About 4M parameters, context 128: the largest that trains usefully on a laptop CPU in an hour.",
            "modern",
            {"vocab_size": 4096, "d_model": 256, "n_heads": 4, "n_layers": 4, "context": 128, "dropout": 0.1},
            {"steps": 2000, "batch_size": 32, "eval_every": 200},
        ),
    )
}


class UnknownPresetError(ValueError):
    pass


def model_config(preset: str, arch: str | None = None, **overrides: object) -> GPTConfig:
    """The model config of a preset in an architecture (the preset's own when None)."""
    if preset not in PRESETS:
        raise UnknownPresetError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    p = PRESETS[preset]
    arch = arch or p.default_arch
    if arch not in ARCHS:
        raise UnknownPresetError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHS)}")
    return GPTConfig(**{**p.size, **ARCHS[arch], **overrides})


@cache
def parameter_count(preset: str, arch: str | None = None) -> int:
    """Parameters of a preset (built on the meta device: no memory, no time)."""
    import torch

    with torch.device("meta"):
        return GPT(model_config(preset, arch)).num_params()


def model_size(config: GPTConfig, batch_size: int) -> dict:
    """Parameters (built on the meta device: no memory, no time) and a rough fp32 training memory in MiB:
    16 bytes a parameter (weights, gradients, AdamW's two moments) plus the activations kept for the
    backward pass (Korthikanti et al. 2022: s·b·h·(34 + 5·a·s/h) bytes a layer in 16-bit, twice that in
    fp32) and the logits with their gradient."""
    import torch

    with torch.device("meta"):
        params = GPT(config).num_params()
    b, s, h, a = batch_size, config.context, config.d_model, config.n_heads
    activations = config.n_layers * s * b * h * (34 + 5 * a * s / h) * 2 + 2 * b * s * config.vocab_size * 4
    return {"params": params, "memory_mib": round((16 * params + activations) / 2**20, 1)}


def list_presets() -> list[dict]:
    """Every preset in every architecture, with its parameter count."""
    out = []
    for p in PRESETS.values():
        out.append(
            {
                "name": p.name,
                "description": p.description,
                "default_arch": p.default_arch,
                **p.size,
                "training": p.training,
                "params": {arch: parameter_count(p.name, arch) for arch in ARCHS},
            }
        )
    return out
