"""A corpus as text: reading it with one-line errors, its tokenizer (trained once and cached, keyed by the
text's hash, under a directory the caller names), and whether its train/validation split holds a window.
No torch here: the dashboard checks uploaded datasets with these (tensors: :mod:`tinygpt.data`).

>>> check_splits_fit(100, 16)
Traceback (most recent call last):
...
tinygpt.corpus.CorpusError: corpus is too short: 100 tokens leave 10 for validation, fewer than one window of context 16 + 1
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from .tokenizer import Tokenizer

log = logging.getLogger(__name__)

VAL_FRACTION = 0.1

#: The validation loss worth reaching on a known corpus (by the sha256 of its text), the default of a run's
#: ``target_val_loss``: holmes' is the series' 1,500-step CPU figure, 3.76 (docs/REPRODUCTION.md).
KNOWN_TARGETS = {"586d0e68285eb9618ab5771a7c42fed42258833c43666e1f49888c6a89e6b94d": 3.76}


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


def known_target(text: str) -> float | None:
    """The target validation loss of this corpus, if it is a known one (:data:`KNOWN_TARGETS`).

    >>> known_target("an unknown text") is None
    True
    """
    return KNOWN_TARGETS.get(sha256_text(text))


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


def check_splits_fit(n_tokens: int, context: int) -> None:
    """Raise CorpusError unless both splits of ``n_tokens`` hold one window of ``context`` + 1."""
    n_val = int(n_tokens * VAL_FRACTION)
    if n_val <= context + 1 or n_tokens - n_val <= context + 1:
        raise CorpusError(
            f"corpus is too short: {n_tokens} tokens leave {n_val} for validation, "
            f"fewer than one window of context {context} + 1"
        )
