"""Our byte-level BPE in the vocabularies other tools read: GPT-2's printable character for each byte, the token
texts and merges that ``tokenizer.json`` (the ``tokenizers`` library) and GGUF's ``gpt2`` tokenizer model hold."""

from __future__ import annotations

from functools import cache

from ..tokenizer import SPLIT_PATTERN, Tokenizer
from .families import ExportError


@cache
def byte_chars() -> tuple[str, ...]:
    """GPT-2's printable stand-in for each byte, the alphabet of a byte-level BPE in ``tokenizers``: printable
    bytes stand for themselves, the others for the characters from U+0100 on, in order.

    >>> byte_chars()[ord("a")], byte_chars()[ord(" ")], byte_chars()[0]
    ('a', 'Ġ', 'Ā')
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return tuple(chars[b] for b in range(256))


def token_texts(tokenizer: Tokenizer) -> list[str]:
    """Each id's bytes as GPT-2 byte characters; ExportError when two ids have the same bytes (neither a
    tokenizer.json nor a GGUF vocabulary can hold that).

    >>> token_texts(Tokenizer([(ord(" "), ord("t"))]))[256]
    'Ġt'
    """
    texts = ["".join(byte_chars()[b] for b in token) for token in tokenizer.vocab]
    if len(set(texts)) != len(texts):
        raise ExportError("the tokenizer has two ids for the same bytes, which no exported vocabulary can hold")
    return texts


def merge_pairs(tokenizer: Tokenizer, texts: list[str]) -> list[tuple[str, str]]:
    """The merges as pairs of token texts, in their ranks (BPE applies the lowest rank first, as we do)."""
    return [(texts[a], texts[b]) for a, b in tokenizer.merges]


def hf_tokenizer(tokenizer: Tokenizer) -> dict:
    """``tokenizer.json`` in the ``tokenizers`` library's format: our pre-split pattern, then bytes as GPT-2's
    byte characters, our ids and merges."""
    texts = token_texts(tokenizer)
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": SPLIT_PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {text: i for i, text in enumerate(texts)},
                  "merges": [list(pair) for pair in merge_pairs(tokenizer, texts)]},
    }
