"""Corpus to token tensor, the train/validation split, and batches.

The last 10% of the tokens is validation and is never trained on. Batches are
random windows of ``context`` tokens drawn from a CPU generator and then moved to
the device, so the same seed gives the same batches on every device.

Tokenizers and encoded corpora are cached under a directory the caller names
(the CLI and the worker pass ``$TINYGPT_HOME/cache``), keyed by content hashes.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from .tokenizer import Tokenizer

log = logging.getLogger(__name__)

VAL_FRACTION = 0.1


class CorpusError(ValueError):
    """A corpus file that is missing, empty, not UTF-8 or too short for the context."""


def read_corpus(path: str | Path) -> str:
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CorpusError(f"corpus file not found: {path}") from None
    except IsADirectoryError:
        raise CorpusError(f"corpus path is a directory, not a text file: {path}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorpusError(f"corpus {path} is not UTF-8 text (bad byte at offset {exc.start})") from None
    if not text.strip():
        raise CorpusError(f"corpus {path} is empty")
    return text


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def load_or_train_tokenizer(text: str, vocab_size: int, cache_dir: Path | None) -> Tokenizer:
    """The corpus' tokenizer of that size, from the cache or trained now (and cached)."""
    path = cache_dir / "tokenizers" / f"{sha256_text(text)[:16]}-{vocab_size}.json" if cache_dir else None
    if path is not None and path.exists():
        return Tokenizer.load(path)
    log.info("training a %d-token tokenizer on %d characters", vocab_size, len(text))
    tok = Tokenizer.train(text, vocab_size)
    if path is not None:
        tok.save(path)
    return tok


def encode_corpus(text: str, tokenizer: Tokenizer, cache_dir: Path | None) -> torch.Tensor:
    """All tokens of the corpus as a 1-D int64 tensor (cached by corpus and tokenizer)."""
    path = cache_dir / "tokens" / f"{sha256_text(text)[:16]}-{tokenizer.fingerprint()}.pt" if cache_dir else None
    if path is not None and path.exists():
        return torch.load(path, weights_only=True)
    tokens = torch.tensor(tokenizer.encode(text), dtype=torch.int16 if tokenizer.vocab_size < 2**15 else torch.int32)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save(tokens, tmp)
        tmp.replace(path)
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


def check_splits_fit(n_tokens: int, context: int) -> None:
    """Raise CorpusError unless both splits of ``n_tokens`` hold one window of ``context`` + 1."""
    n_val = int(n_tokens * VAL_FRACTION)
    if n_val <= context + 1 or n_tokens - n_val <= context + 1:
        raise CorpusError(
            f"corpus is too short: {n_tokens} tokens leave {n_val} for validation, "
            f"fewer than one window of context {context} + 1"
        )


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
