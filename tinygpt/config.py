"""A model's shape: :class:`GPTConfig` and the sizes a model may have. No torch here: the dashboard, the
form and the run options read these without importing it (tests/test_layers.py).

>>> GPTConfig().num_params  # the series' model: 5.8M parameters
5781504
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Literal, get_args

PosKind = Literal["rope", "learned"]
NormKind = Literal["layernorm", "rmsnorm"]
MlpKind = Literal["gelu", "swiglu", "relu2"]


#: The sizes a model may have: the run options' bounds (``tinygpt/run_config.py``), and what a checkpoint may
#: ask for before anything is built from it (:func:`check_model_sizes`).
SIZE_BOUNDS: dict[str, tuple[int, int]] = {"vocab_size": (256, 65536), "context": (8, 8192), "d_model": (8, 4096),
                                           "n_heads": (1, 64), "n_layers": (1, 64)}


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 4096
    context: int = 256
    d_model: int = 256
    n_heads: int = 4
    n_layers: int = 6
    dropout: float = 0.1
    pos: PosKind = "rope"
    norm: NormKind = "layernorm"
    mlp: MlpKind = "gelu"
    bias: bool = True
    attn_bias: bool = False
    rope_base: float = 10000.0
    qk_norm: bool = False  # queries and keys RMS-normalised per head (no weights), before RoPE
    untied_head: bool = False  # the output head its own matrix (zero at the start), not the token embedding's
    attn_dropout: float | None = None  # on the attention probabilities; None: ``dropout``'s (the series')

    @property
    def attention_dropout(self) -> float:
        """The dropout on the attention probabilities. 0 keeps the CPU's fused attention kernel (with any other
        value SDPA falls back to building the (T, T) matrix: a holmes step 28 % slower than without dropout
        here, against 10 % for dropout on the residual branches alone; docs/SPEEDRUN.md).

        >>> GPTConfig(dropout=0.1).attention_dropout, GPTConfig(dropout=0.1, attn_dropout=0.0).attention_dropout
        (0.1, 0.0)
        """
        return self.dropout if self.attn_dropout is None else self.attn_dropout

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.pos == "rope" and (self.d_model // self.n_heads) % 2:
            raise ValueError(f"pos 'rope' needs an even head dimension: d_model ({self.d_model}) / n_heads "
                             f"({self.n_heads}) = {self.d_model // self.n_heads}")
        for name, allowed in (("pos", get_args(PosKind)), ("norm", get_args(NormKind)), ("mlp", get_args(MlpKind))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {getattr(self, name)!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def mlp_hidden(self) -> int:
        if self.mlp != "swiglu":  # gelu, relu2
            return 4 * self.d_model
        return 64 * math.ceil(8 * self.d_model / 3 / 64)

    @property
    def num_params(self) -> int:
        """The parameters of the model this config builds, counted without building it (a tied output head
        counted once): :meth:`tinygpt.model.GPT.num_params` of the same config, checked in tests/test_model.py."""
        d, hidden = self.d_model, self.mlp_hidden
        norm = d * (2 if self.norm == "layernorm" and self.bias else 1)  # weight (and bias)
        attention = 4 * d * d + (4 * d if self.attn_bias else 0)  # qkv (3d x d) and proj (d x d)
        mlp_in = (2 if self.mlp == "swiglu" else 1) * (d * hidden + (hidden if self.bias else 0))  # up (and gate)
        mlp_out = hidden * d + (d if self.bias else 0)
        block = 2 * norm + attention + mlp_in + mlp_out
        positions = self.context * d if self.pos == "learned" else 0
        head = self.vocab_size * d if self.untied_head else 0
        return self.vocab_size * d + positions + self.n_layers * block + norm + head

    @property
    def training_flops_per_token(self) -> int:
        """Floating-point operations to train on one token (forward and backward): 6 per parameter, plus the
        attention's 12 x layers x width x context (nanoGPT's and PaLM's estimate). The compare page's FLOPs
        axis is tokens seen times this.

        >>> GPTConfig().training_flops_per_token  # 6 x 5,781,504 + 12 x 6 x 256 x 256
        39407616
        """
        return 6 * self.num_params + 12 * self.n_layers * self.d_model * self.context

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> GPTConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def check_model_sizes(config: GPTConfig) -> None:
    """ValueError naming the first size outside :data:`SIZE_BOUNDS` (a forged config asking for any size).

    >>> check_model_sizes(GPTConfig(d_model=8192, n_heads=8))
    Traceback (most recent call last):
    ...
    ValueError: d_model must be in [8, 4096], got 8192
    """
    for name, (low, high) in SIZE_BOUNDS.items():
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"{name} must be in [{low}, {high}], got {value!r}")
