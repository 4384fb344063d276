"""Byte-level BPE tokenizer, as in the tiny-GPT series (GPT-2 style pre-split).

Ids 0-255 are the raw bytes; every merge adds one id. Text is first cut into
chunks by :data:`SPLIT_PATTERN`; merges never cross a chunk boundary.

Training picks, at every step, the most frequent adjacent pair. Ties are broken
deterministically by the *smallest pair* ``(left_id, right_id)`` in lexicographic
order, so two trainers that follow this rule produce exactly the same merges.

>>> tok = Tokenizer.train("the cat, the hat, the bat", vocab_size=260)
>>> tok.merges[0]   # 'a'+'t', 't'+'h', 'h'+'e' occur 3 times each; (97, 116) is the smallest
(97, 116)
>>> tok.decode(tok.encode("the hat"))
'the hat'

Two trainers share that rule: :func:`train_merges` (incremental pair counts, the
one used) and :func:`train_merges_simple` (recounts every pair after every
merge; the reference that tests and benchmarks compare against).
"""

from __future__ import annotations

import hashlib
import heapq
import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path

import regex

from .files import write_atomically

#: GPT-2 style pre-split: contractions, letter runs, digit runs, punctuation runs, whitespace.
SPLIT_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
FORMAT_NAME = "tinygpt-bpe"
FORMAT_VERSION = 1

Pair = tuple[int, int]
#: The longest token a tokenizer may hold. Real BPE tokens are a few to a few dozen bytes (the longest of the
#: Holmes tokenizer's 4,096: 16); merges of a token with itself double its length at each step, so a forged
#: list of 40 merges would ask for a terabyte. Checked before a token is built.
MAX_TOKEN_BYTES = 1024
MAX_MERGES = 65536 - 256  # the largest vocabulary (tinygpt.config.SIZE_BOUNDS) less the byte ids


class TokenizerError(ValueError):
    """A tokenizer file that is missing, corrupt or of another format."""


_SPLIT_RE = regex.compile(SPLIT_PATTERN)


def split_chunks(text: str) -> list[str]:
    """Cut text into the chunks that merges never cross.

    >>> split_chunks("Holmes's 221B, said he.")
    ['Holmes', "'s", ' 221', 'B', ',', ' said', ' he', '.']
    """
    return _SPLIT_RE.findall(text)


def count_words(text: str) -> Counter[bytes]:
    """How often each chunk (as UTF-8 bytes) occurs in the text."""
    return Counter(chunk.encode("utf-8") for chunk in split_chunks(text))


def _merge_word(word: list[int], pair: Pair, new_id: int) -> list[int]:
    """Replace every non-overlapping occurrence of ``pair`` (left to right) by ``new_id``."""
    out: list[int] = []
    i, n = 0, len(word)
    a, b = pair
    while i < n:
        if i + 1 < n and word[i] == a and word[i + 1] == b:
            out.append(new_id)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return out


def _best_pair(counts: dict[Pair, int]) -> Pair | None:
    """Highest count; among equal counts the smallest pair. None when no pair occurs."""
    best: Pair | None = None
    best_count = 0
    for pair, count in counts.items():
        if count > best_count or (count == best_count and best is not None and pair < best):
            best, best_count = pair, count
    return best


def train_merges_simple(words: Counter[bytes], num_merges: int) -> list[Pair]:
    """Reference trainer: recount every pair of every word after every merge.

    Slow (it touches the whole vocabulary of chunks at every merge) but obviously
    right; :func:`train_merges` must produce exactly the same list.
    """
    vocab = [(list(w), f) for w, f in words.items()]
    merges: list[Pair] = []
    for new_id in range(256, 256 + num_merges):
        counts: dict[Pair, int] = defaultdict(int)
        for word, freq in vocab:
            for pair in zip(word, word[1:], strict=False):
                counts[pair] += freq
        pair = _best_pair(counts)
        if pair is None:
            break
        merges.append(pair)
        vocab = [(_merge_word(word, pair, new_id), freq) for word, freq in vocab]
    return merges


def train_merges(words: Counter[bytes], num_merges: int) -> list[Pair]:
    """Incremental trainer: after a merge, only the words containing the pair are updated.

    Pair counts live in a dict; a max-heap of ``(-count, pair)`` with lazy deletion
    finds the best pair (entries whose count no longer matches are skipped). An index
    ``pair -> word ids`` lists the words to revisit after each merge.
    """
    vocab: list[list[int]] = [list(w) for w in words]
    freqs: list[int] = list(words.values())
    counts: dict[Pair, int] = defaultdict(int)
    where: dict[Pair, set[int]] = defaultdict(set)
    for idx, word in enumerate(vocab):
        freq = freqs[idx]
        for pair in zip(word, word[1:], strict=False):
            counts[pair] += freq
            where[pair].add(idx)
    heap = [(-c, p) for p, c in counts.items()]
    heapq.heapify(heap)

    merges: list[Pair] = []
    for new_id in range(256, 256 + num_merges):
        pair = _pop_best(heap, counts)
        if pair is None:
            break
        merges.append(pair)
        delta: dict[Pair, int] = defaultdict(int)
        for idx in where.pop(pair, ()):
            old = vocab[idx]
            new = _merge_word(old, pair, new_id)
            freq = freqs[idx]
            for p in zip(old, old[1:], strict=False):
                delta[p] -= freq
            for p in zip(new, new[1:], strict=False):
                delta[p] += freq
                where[p].add(idx)
            vocab[idx] = new
        for p, d in delta.items():
            if d == 0:
                continue
            c = counts[p] + d
            if c > 0:
                counts[p] = c
                heapq.heappush(heap, (-c, p))
            else:
                del counts[p]
                where.pop(p, None)
    return merges


def _pop_best(heap: list[tuple[int, Pair]], counts: dict[Pair, int]) -> Pair | None:
    while heap:
        neg, pair = heapq.heappop(heap)
        if counts.get(pair, 0) == -neg and -neg > 0:
            return pair
    return None


class Tokenizer:
    """Byte-level BPE with ranked merges. Build with :meth:`train` or :meth:`load`."""

    def __init__(self, merges: Iterable[Pair]) -> None:
        self.merges: list[Pair] = [(int(a), int(b)) for a, b in merges]
        self.ranks: dict[Pair, int] = {}
        self.vocab: list[bytes] = [bytes([i]) for i in range(256)]
        if len(self.merges) > MAX_MERGES:
            raise TokenizerError(f"{len(self.merges)} merges: a tokenizer has at most {MAX_MERGES}")
        for rank, (a, b) in enumerate(self.merges):
            new_id = 256 + rank
            if not (0 <= a < new_id and 0 <= b < new_id):
                raise TokenizerError(f"merge {rank} refers to id {max(a, b)}, which is not defined yet")
            if len(self.vocab[a]) + len(self.vocab[b]) > MAX_TOKEN_BYTES:
                raise TokenizerError(f"merge {rank} makes a token of {len(self.vocab[a]) + len(self.vocab[b])} "
                                     f"bytes; a token is at most {MAX_TOKEN_BYTES}")
            self.ranks[(a, b)] = rank
            self.vocab.append(self.vocab[a] + self.vocab[b])
        self._cache: dict[str, list[int]] = {}

    @property
    def vocab_size(self) -> int:
        return 256 + len(self.merges)

    @classmethod
    def train(cls, text: str, vocab_size: int, *, simple: bool = False) -> Tokenizer:
        """Learn ``vocab_size - 256`` merges from text (fewer if the text runs out of pairs)."""
        if vocab_size < 256:
            raise ValueError(f"vocab_size must be at least 256 (the byte ids), got {vocab_size}")
        trainer = train_merges_simple if simple else train_merges
        return cls(trainer(count_words(text), vocab_size - 256))

    # -- encoding ---------------------------------------------------------------------
    def _encode_chunk(self, chunk: str) -> list[int]:
        cached = self._cache.get(chunk)
        if cached is not None:
            return cached
        ids = list(chunk.encode("utf-8"))
        while len(ids) >= 2:
            pair = min(zip(ids, ids[1:], strict=False), key=lambda p: self.ranks.get(p, 1 << 62))
            rank = self.ranks.get(pair)
            if rank is None:
                break
            ids = _merge_word(ids, pair, 256 + rank)
        if len(self._cache) < 1 << 18:
            self._cache[chunk] = ids
        return ids

    def encode(self, text: str) -> list[int]:
        """Text to ids, replaying merges by rank inside each chunk."""
        out: list[int] = []
        for chunk in split_chunks(text):
            out.extend(self._encode_chunk(chunk))
        return out

    def decode(self, ids: Iterable[int]) -> str:
        """Ids to text; byte sequences that are not valid UTF-8 become U+FFFD."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        try:
            return b"".join(self.vocab[i] for i in ids)
        except IndexError as exc:
            raise ValueError(f"token id out of range for a vocabulary of {self.vocab_size}") from exc

    def token_bytes(self, token_id: int) -> bytes:
        return self.vocab[token_id]

    # -- files ------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "pattern": SPLIT_PATTERN,
            "vocab_size": self.vocab_size,
            "merges": [list(m) for m in self.merges],
        }

    @classmethod
    def from_dict(cls, data: object, *, source: str = "tokenizer data") -> Tokenizer:
        if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
            raise TokenizerError(f"{source} is not a tinygpt tokenizer (expected format {FORMAT_NAME!r})")
        if data.get("version") != FORMAT_VERSION:
            raise TokenizerError(
                f"{source} has tokenizer format version {data.get('version')!r}; this tinygpt reads version {FORMAT_VERSION}"
            )
        if data.get("pattern") != SPLIT_PATTERN:
            raise TokenizerError(f"{source} was trained with another pre-split pattern")
        merges = data.get("merges")
        if not isinstance(merges, list) or not all(
            isinstance(m, list) and len(m) == 2 and all(isinstance(x, int) for x in m) for m in merges
        ):
            raise TokenizerError(f"{source} is corrupt: 'merges' must be a list of [int, int] pairs")
        try:
            tok = cls(merges)
        except TokenizerError as exc:
            raise TokenizerError(f"{source} is corrupt: {exc}") from None
        if data.get("vocab_size") != tok.vocab_size:
            raise TokenizerError(f"{source} is corrupt: vocab_size does not match its {len(merges)} merges")
        return tok

    def save(self, path: str | Path) -> None:
        write_atomically(Path(path), lambda tmp: tmp.write_text(json.dumps(self.to_dict())))

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise TokenizerError(f"tokenizer file not found: {path}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise TokenizerError(f"{path} is not a valid tokenizer file: {exc}") from None
        return cls.from_dict(data, source=str(path))

    def fingerprint(self) -> str:
        """Short content hash: two tokenizers with the same merges share it."""
        return hashlib.sha256(json.dumps(self.merges).encode()).hexdigest()[:16]
