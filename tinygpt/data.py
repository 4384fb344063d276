"""Corpus to token tensor, the train/validation split, and batches (the text side: :mod:`tinygpt.corpus`).

The last 10% of the tokens is validation and is never trained on. Batches are
random windows of ``context`` tokens drawn from a CPU generator and then moved to
the device, so the same seed gives the same batches on every device.

Encoded corpora are cached under a directory the caller names (the CLI and the
worker pass ``$TINYGPT_HOME/cache``), keyed by content hashes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from .corpus import VAL_FRACTION, check_splits_fit, sha256_text
from .files import write_atomically
from .tokenizer import Tokenizer


def encode_corpus(text: str, tokenizer: Tokenizer, cache_dir: Path | None) -> torch.Tensor:
    """All tokens of the corpus as a 1-D int64 tensor (cached by corpus and tokenizer)."""
    path = cache_dir / "tokens" / f"{sha256_text(text)[:16]}-{tokenizer.fingerprint()}.pt" if cache_dir else None
    if path is not None and path.exists():
        return torch.load(path, weights_only=True)
    tokens = torch.tensor(tokenizer.encode(text), dtype=torch.int16 if tokenizer.vocab_size < 2**15 else torch.int32)
    if path is not None:
        write_atomically(path, lambda tmp: torch.save(tokens, tmp))
    return tokens


@dataclass
class Splits:
    train: torch.Tensor  # (N_train,) token ids
    val: torch.Tensor  # (N_val,)

    @classmethod
    def from_tokens(cls, tokens: torch.Tensor, context: int) -> Splits:
        check_splits_fit(len(tokens), context)
        n_val = int(len(tokens) * VAL_FRACTION)
        return cls(tokens[: len(tokens) - n_val].long(), tokens[len(tokens) - n_val :].long())


def validation_tokens(corpus: str | Path, tokenizer: Tokenizer, context: int, cache_dir: Path | None) -> torch.Tensor:
    """The validation split (N_val,) of a corpus file as a run trained on it splits it (read and encoded as
    training does, from the same cache)."""
    from .corpus import read_corpus

    return Splits.from_tokens(encode_corpus(read_corpus(corpus), tokenizer, cache_dir), context).val


def passage(tokens: torch.Tensor, context: int, index: int) -> torch.Tensor:
    """The ``index``-th window of ``context`` tokens of a split, back to back: (context,).

    >>> passage(torch.arange(10), 4, 1).tolist(), passage_count(torch.arange(10), 4)
    ([4, 5, 6, 7], 2)
    """
    if not 0 <= index < passage_count(tokens, context):
        raise ValueError(f"passage {index} is not there: the split has passages 0 to {passage_count(tokens, context) - 1}")
    return tokens[index * context:(index + 1) * context]


def passage_count(tokens: torch.Tensor, context: int) -> int:
    return len(tokens) // context


def get_batch(
    tokens: torch.Tensor, batch_size: int, context: int, generator: torch.Generator, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows and their next-token targets, each (B, T), sampled on the CPU."""
    ix = torch.randint(len(tokens) - context - 1, (batch_size,), generator=generator)
    offsets = torch.arange(context + 1)
    windows = tokens[ix[:, None] + offsets]  # (B, T+1)
    x, y = windows[:, :-1], windows[:, 1:]
    if device.type == "cuda":
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x.to(device), y.to(device)
