import json
import time
from collections import Counter

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tinygpt.tokenizer import (
    FORMAT_VERSION,
    Tokenizer,
    TokenizerError,
    count_words,
    split_chunks,
    train_merges,
    train_merges_simple,
)

TRAINERS = [pytest.param(train_merges, id="incremental"), pytest.param(train_merges_simple, id="simple")]


def test_split_follows_gpt2_pattern():
    assert split_chunks("I'll see you're 42 dogs!!  ok\n\nyes") == [
        "I", "'ll", " see", " you", "'re", " 42", " dogs", "!!", " ", " ok", "\n", "\n", "yes",
    ]


@pytest.mark.parametrize("trainer", TRAINERS)
def test_known_merges_with_smallest_pair_tie_break(trainer):
    # 'a'+'a' occurs 4 times in "aaaaa" (overlapping count), more than anything else.
    assert trainer(Counter({b"aaaaa": 1}), 1) == [(97, 97)]
    # "ab" and "cd" both occur twice: the smaller pair (97, 98) wins, then (99, 100).
    assert trainer(Counter({b"ab": 2, b"cd": 2}), 2) == [(97, 98), (99, 100)]
    # After merging (97, 98) -> 256, the pair (256, 99) counts 3: the merges build on each other.
    assert trainer(Counter({b"abc": 3, b"ab": 1}), 2) == [(97, 98), (256, 99)]


@pytest.mark.parametrize("trainer", TRAINERS)
def test_merges_never_cross_chunks(trainer):
    merges = trainer(count_words("a b a b a b"), 10)
    tok = Tokenizer(merges)
    # chunks are "a", " b", " a", ...: no token may end in a letter and go on with a space
    assert merges  # something was learned ((32, 97) and (32, 98))
    assert all(b"a " not in v and b"b " not in v for v in tok.vocab)


@pytest.mark.parametrize("trainer", TRAINERS)
def test_training_stops_when_pairs_run_out(trainer):
    assert trainer(Counter({b"ab": 1}), 5) == [(97, 98)]


def test_incremental_matches_simple_on_a_corpus_slice(holmes_text):
    words = count_words(holmes_text[:100_000])
    assert train_merges(words, 300) == train_merges_simple(words, 300)


@pytest.mark.slow  # the simple trainer: about a minute (the slice still has pairs for all 3,840 merges)
def test_incremental_matches_simple_to_4096_ids(holmes_text):
    words = count_words(holmes_text[:50_000])  # 2,722 distinct words: the late merges are mostly ties
    merges = train_merges(words, 4096 - 256)
    assert len(merges) == 4096 - 256 and merges == train_merges_simple(words, 4096 - 256)


@pytest.fixture(scope="module", params=["incremental", "simple"])
def trained(request, holmes_text):
    """One small tokenizer per implementation, to run round-trip checks over both."""
    return Tokenizer.train(holmes_text[:20_000], 300, simple=request.param == "simple")


SPECIAL = ["", "\r\n", "\x00", "héllo wörld", "e\u0301\u0301", "👩‍👩‍👧 🎉🎉", "tab\there", "  leading", "日本語のテキスト"]


@pytest.mark.parametrize("text", SPECIAL)
def test_round_trip_special_strings(trained, text):
    assert trained.decode(trained.encode(text)) == text


@settings(max_examples=200, deadline=None)
@given(text=st.text())
@example(text="\r\n\x00")
def test_round_trip_any_string(small_tokenizer, text):
    assert small_tokenizer.decode(small_tokenizer.encode(text)) == text


def test_encode_compresses_and_uses_merges(small_tokenizer, holmes_text):
    sample = holmes_text[:10_000]
    ids = small_tokenizer.encode(sample)
    assert len(ids) < len(sample.encode()) / 1.8
    assert max(ids) >= 256


def test_decode_replaces_invalid_utf8():
    tok = Tokenizer([])
    assert tok.decode([0xE2, 0x82]) == "\ufffd"  # a cut-off 3-byte sequence
    with pytest.raises(ValueError, match="out of range"):
        tok.decode([300])


def test_save_load_round_trip(tmp_path, small_tokenizer):
    path = tmp_path / "tok.json"
    small_tokenizer.save(path)
    loaded = Tokenizer.load(path)
    assert loaded.merges == small_tokenizer.merges
    assert loaded.fingerprint() == small_tokenizer.fingerprint()
    data = json.loads(path.read_text())
    assert data["format"] == "tinygpt-bpe" and data["version"] == FORMAT_VERSION and data["vocab_size"] == 512


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "is not a valid tokenizer file"),
        ('{"format": "other"}', "is not a tinygpt tokenizer"),
        ('{"format": "tinygpt-bpe", "version": 99}', "format version 99"),
        (None, "corrupt: 'merges'"),
        ("BAD_IDS", "refers to id 999"),
    ],
)
def test_load_rejects_bad_files(tmp_path, small_tokenizer, content, message):
    path = tmp_path / "tok.json"
    good = small_tokenizer.to_dict()
    if content is None:
        content = json.dumps({**good, "merges": "nope"})
    elif content == "BAD_IDS":
        content = json.dumps({**good, "merges": [[999, 1]], "vocab_size": 257})
    path.write_text(content)
    with pytest.raises(TokenizerError, match=message):
        Tokenizer.load(path)


def test_load_missing_file(tmp_path):
    with pytest.raises(TokenizerError, match="not found"):
        Tokenizer.load(tmp_path / "nope.json")


@pytest.mark.slow
def test_full_corpus_4096_ids_fast_and_compressing(holmes_text):
    t0 = time.perf_counter()
    tok = Tokenizer.train(holmes_text, 4096)
    seconds = time.perf_counter() - t0
    ids = tok.encode(holmes_text)
    assert tok.vocab_size == 4096
    assert 1_000_000 < len(ids) < 1_070_000  # the series: 1,033,380 tokens
    assert seconds < 223 / 20
