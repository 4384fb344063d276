import pytest
import torch

from tinygpt.model import GPT
from tinygpt.presets import ARCHS, model_config
from tinygpt.sample import filter_logits, generate, nearest_tokens, sample_text, stream_text, token_similarity


@pytest.fixture(scope="module", params=list(ARCHS))
def model(request, small_tokenizer):
    torch.manual_seed(0)
    return GPT(model_config("tiny", request.param, vocab_size=512, context=32)).eval()


def test_cached_generation_equals_full_recompute(model, small_tokenizer):
    prompt = small_tokenizer.encode("Holmes said")
    kwargs = dict(temperature=1.0, top_k=50, seed=7)
    cached = list(generate(model, prompt, 60, use_cache=True, **kwargs))  # 60 > context 32: the window slides
    full = list(generate(model, prompt, 60, use_cache=False, **kwargs))
    assert len(cached) == 60 and cached == full


def test_same_seed_same_tokens_other_seed_other_tokens(model):
    a = list(generate(model, [10, 20], 30, seed=1))
    assert a == list(generate(model, [10, 20], 30, seed=1))
    assert a != list(generate(model, [10, 20], 30, seed=2))


def test_temperature_zero_is_greedy(model):
    with torch.no_grad():
        logits, _ = model(torch.tensor([[10, 20]]))
    first = next(generate(model, [10, 20], 1, temperature=0))
    assert first == int(logits[0, -1].argmax())


def test_filter_logits_known_answers():
    logits = torch.tensor([1.0, 3.0, 2.0, 0.0])
    top2 = filter_logits(logits, top_k=2)
    assert torch.isinf(top2).tolist() == [True, False, False, True]
    # probabilities ~ [0.087, 0.644, 0.237, 0.032]: top_p 0.7 keeps the two largest
    nucleus = filter_logits(logits, top_p=0.7)
    assert torch.isinf(nucleus).tolist() == [True, False, False, True]
    # top_p smaller than the largest probability still keeps the most likely token
    assert torch.isinf(filter_logits(logits, top_p=0.01)).tolist() == [True, False, True, True]


def test_top_k_one_always_picks_the_argmax(model):
    tokens = list(generate(model, [10], 10, top_k=1, temperature=1.0, seed=3))
    greedy = list(generate(model, [10], 10, temperature=0))
    assert tokens == greedy


def test_empty_prompt_starts_from_a_newline(model, small_tokenizer):
    text = sample_text(model, small_tokenizer, "", 5, seed=1)
    ids = small_tokenizer.encode(text)
    assert len(ids) >= 1  # no error; the newline itself is not part of the output
    assert list(generate(model, [], 5, seed=1)) == list(generate(model, [10], 5, seed=1))


def test_prompt_longer_than_context_keeps_its_tail(model):
    long_prompt = list(range(100, 200))  # 100 tokens, context 32
    assert list(generate(model, long_prompt, 5, seed=1)) == list(generate(model, long_prompt[-32:], 5, seed=1))


def test_stream_text_pieces_join_to_the_full_text(model, small_tokenizer):
    pieces = list(stream_text(model, small_tokenizer, "Watson", 25, seed=4))
    assert "Watson" + "".join(pieces) == sample_text(model, small_tokenizer, "Watson", 25, seed=4)
    assert all(isinstance(p, str) for p in pieces)


def test_unknown_bytes_in_prompt_are_fine(model, small_tokenizer):
    text = sample_text(model, small_tokenizer, "\x00\x01 ☃ 🎉", 5, seed=1)
    assert text.startswith("\x00\x01 ☃ 🎉")


def test_nearest_tokens_excludes_itself_and_is_sorted(model, small_tokenizer):
    word = small_tokenizer.decode([300])
    neighbours = nearest_tokens(model, small_tokenizer, word, k=5)
    assert len(neighbours) == 5 and word not in [t for t, _ in neighbours]
    sims = [s for _, s in neighbours]
    assert sims == sorted(sims, reverse=True) and all(-1 <= s <= 1 for s in sims)
    # the nearest is at least as similar as any other token
    other = small_tokenizer.decode([301])
    assert token_similarity(model, small_tokenizer, word, other) <= sims[0] + 1e-6


def test_neighbours_need_a_single_token(model, small_tokenizer):
    with pytest.raises(ValueError, match="tokens .* not one"):
        nearest_tokens(model, small_tokenizer, "Holmes and Watson went out")
