"""What an export reads: a checkpoint (or a run folder's ``best.pt``), checked before use, and the run folder
around it (its metrics and options, for the model card)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..checkpoint import checked_parts, read_checkpoint
from ..config import GPTConfig
from ..device import DTYPES
from ..tokenizer import Tokenizer

Weights = dict[str, torch.Tensor]


@dataclass
class ExportSource:
    """A checkpoint's parts: weights under our names, the model config, the tokenizer and the whole state (run
    options, step, best validation loss); ``folder`` is where it lies (a run folder's ``metrics.csv`` and
    ``config.json`` beside it feed the model card)."""

    weights: Weights
    config: GPTConfig
    tokenizer: Tokenizer
    state: dict
    file: Path

    @property
    def folder(self) -> Path:
        return self.file.parent


def read_source(path: str | Path) -> ExportSource:
    """A checkpoint file (``.pt`` or an exported ``.safetensors``), or a run folder's ``best.pt``, each part
    checked before use (:func:`tinygpt.checkpoint.checked_parts`)."""
    path = Path(path)
    file = path / "best.pt" if path.is_dir() else path
    state = read_checkpoint(file)
    config, tokenizer = checked_parts(state, file)
    return ExportSource(state["model"], config, tokenizer, state, file)


def cast(weights: Weights, dtype: str) -> Weights:
    """Each weight contiguous, in its own memory (safetensors stores no shared or strided tensors), as ``dtype``."""
    return {name: w.detach().to(DTYPES[dtype]).contiguous().clone() for name, w in weights.items()}


def bias_or_zeros(weights: Weights, name: str, size: int) -> torch.Tensor:
    """Our bias ``name``, or zeros where our model has none and the stock class always has one (the same sums)."""
    if name in weights:
        return weights[name]
    return torch.zeros(size, dtype=weights["tok_emb.weight"].dtype)


def heads_interleaved_qkv(fused: torch.Tensor, config: GPTConfig) -> torch.Tensor:
    """Our fused qkv rows (3 x heads x head_dim) in GPT-NeoX's order (heads x 3 x head_dim).

    >>> heads_interleaved_qkv(torch.arange(12.0), GPTConfig(d_model=4, n_heads=2)).int().tolist()
    [0, 1, 4, 5, 8, 9, 2, 3, 6, 7, 10, 11]
    """
    h, hd = config.n_heads, config.head_dim
    rest = fused.shape[1:]
    return fused.reshape(3, h, hd, *rest).transpose(0, 1).reshape(3 * h * hd, *rest)
