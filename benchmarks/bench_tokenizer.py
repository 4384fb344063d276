"""Tokenizer: the incremental trainer vs the simple (recount-everything) trainer, and encode speed.

    python -m benchmarks.bench_tokenizer [--vocab-size 4096] [--chars N]
"""

from __future__ import annotations

import argparse
import json
import time

from tinygpt.tokenizer import Tokenizer, count_words, train_merges, train_merges_simple

from .common import holmes_path, machine


def run(vocab_size: int = 4096, simple_merges: int | None = 500, chars: int | None = None) -> dict:
    """Full incremental training to ``vocab_size``; both trainers side by side for ``simple_merges``
    merges (the simple one needs about 20 minutes for all 3,840 merges on the full corpus here;
    pass ``simple_merges=None`` to time them all)."""
    text = holmes_path().read_text(encoding="utf-8")
    if chars:
        text = text[:chars]
    num_merges = vocab_size - 256
    t0 = time.perf_counter()
    words = count_words(text)
    split_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    full = train_merges(words, num_merges)
    full_s = time.perf_counter() - t0

    side = min(simple_merges or num_merges, num_merges)
    t0 = time.perf_counter()
    fast = train_merges(words, side)
    fast_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    simple = train_merges_simple(words, side)
    simple_s = time.perf_counter() - t0

    tok = Tokenizer(full)
    t0 = time.perf_counter()
    ids = tok.encode(text)
    encode_s = time.perf_counter() - t0
    n_bytes = len(text.encode("utf-8"))
    return {
        "corpus_bytes": n_bytes,
        "vocab_size": vocab_size,
        "split_s": split_s,
        "full_incremental_s": full_s + split_s,
        "speedup_vs_series_223s": 223 / (full_s + split_s),
        "side_by_side_merges": side,
        "incremental_s": fast_s,
        "simple_s": simple_s,
        "speedup": simple_s / fast_s,
        "same_merges": fast == simple and full[:side] == simple,
        "tokens": len(ids),
        "bytes_per_token": n_bytes / len(ids),
        "encode_mb_per_s": n_bytes / 1e6 / encode_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--simple-merges", type=int, default=500, help="merges to time both trainers on (0: all)")
    ap.add_argument("--chars", type=int)
    args = ap.parse_args()
    print(machine())
    print(json.dumps(run(args.vocab_size, args.simple_merges or None, args.chars), indent=2))


if __name__ == "__main__":
    main()
