"""Model presets: sizes x architectures, as data that the CLI, the form and the API list.

>>> model_config("holmes").d_model
256
>>> model_config("tiny", "classic").pos
'learned'
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import GPTConfig

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


def parameter_count(preset: str, arch: str | None = None) -> int:
    """Parameters of a preset in an architecture (counted: :attr:`GPTConfig.num_params`)."""
    return model_config(preset, arch).num_params


def model_size(config: GPTConfig, batch_size: int) -> dict:
    """Parameters and the fp32 training memory in MiB (:func:`training_memory`): what the new-run form shows."""
    return {"params": config.num_params, "memory_mib": round(training_memory(config, batch_size) / 2**20, 1)}


def training_memory(config: GPTConfig, batch_size: int, *, precision: str = "fp32", grad_checkpointing: bool = False,
                    processes: int = 1) -> int:
    """About how many bytes one training process needs at least (``processes`` share the batch), before
    PyTorch's own ~0.3 GB: fp32 weights, gradients and AdamW's two moments (16 bytes a parameter), the
    activations a step keeps for its backward pass (about 80 bytes per token, layer and unit of width;
    with ``grad_checkpointing`` each block's input and one block's worth), and the logits (12 bytes per
    token and vocabulary entry). No attention scores (flash attention keeps none): a lower bound, 6-13%
    under the peaks of the H200 holmes sweep in BENCHMARKS.md (batch 8-256, fp32 and bf16; batch 256
    fp32: 11,488 MiB measured, 10,840 estimated). The dashboard refuses runs that cannot fit with it.

    >>> round(training_memory(model_config("holmes"), 256) / 2**30, 1)
    10.6
    """
    tokens = -(-batch_size // processes) * config.context
    block = 80 * config.d_model  # what one block keeps for its backward pass, per token
    # checkpointing keeps each block's input (4 bytes a unit) and recomputes one block at a time
    kept = config.n_layers * 4 * config.d_model + block if grad_checkpointing else config.n_layers * block
    activations = tokens * (kept + 12 * config.vocab_size)
    if precision != "fp32":  # bf16/fp16 autocast (or "auto", which may pick one): about 0.64x (the H200 sweep)
        activations = activations * 16 // 25
    return 16 * config.num_params + activations


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
