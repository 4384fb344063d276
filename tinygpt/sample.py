"""Text generation (token by token, with a KV cache) and embedding inspection.

>>> for token_id in generate(model, tokenizer.encode("Holmes"), 40, temperature=0.8, seed=1):  # doctest: +SKIP
...     print(tokenizer.decode([token_id]), end="", flush=True)

Defined edge cases:

- An empty prompt starts from a newline (the corpus' paragraph break), since the
  model needs at least one token to condition on.
- A prompt longer than the context keeps its last ``context`` tokens.
- With the cache, each new token costs one position's work while the sequence fits
  the context; past that, the window slides and every step recomputes the last
  ``context`` tokens, exactly as the no-cache path does, so both give the same tokens.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from .model import GPT, KVCache
from .tokenizer import Tokenizer

EMPTY_PROMPT_TEXT = "\n"


def filter_logits(logits: torch.Tensor, top_k: int | None = None, top_p: float | None = None) -> torch.Tensor:
    """Set to -inf every logit outside the top k and outside the smallest set with mass >= top_p.

    logits: (vocab,). The most likely token always survives.
    """
    if top_k is not None and 0 < top_k < logits.numel():
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and 0.0 < top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = sorted_logits.softmax(-1)
        mass_before = probs.cumsum(-1) - probs  # probability of the tokens ranked above each
        drop_sorted = mass_before >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def pick_token(
    logits: torch.Tensor, generator: torch.Generator, temperature: float, top_k: int | None, top_p: float | None
) -> int:
    """One token from last-position logits (vocab,); temperature 0 means greedy."""
    logits = logits.float().cpu()
    if temperature <= 0:
        return int(logits.argmax())
    probs = F.softmax(filter_logits(logits / temperature, top_k, top_p), dim=-1)
    return draw_from(probs, generator)


def draw_from(probs: torch.Tensor, generator: torch.Generator) -> int:
    """One index drawn with probability ``probs[i]`` (inverse CDF: one uniform number, one search).

    One uniform draw instead of ``torch.multinomial``'s one exponential per vocabulary entry:
    about 20x cheaper for 4,096 tokens, which matters when each decoded token costs a few ms.
    A zero-probability index is never drawn.

    >>> draw_from(torch.tensor([0.0, 1.0, 0.0]), torch.Generator().manual_seed(0))
    1
    """
    cdf = probs.double().cumsum(0)  # (vocab,) float64, so rounding cannot skip a token
    u = torch.rand((), generator=generator, dtype=torch.float64) * cdf[-1]
    index = int(torch.searchsorted(cdf, u, right=True))
    if index >= probs.numel():  # u rounded up to the total: take the last possible token
        index = int(probs.nonzero()[-1])
    return index


@torch.inference_mode()
def generate(
    model: GPT,
    prompt_ids: list[int],
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    use_cache: bool = True,
    empty_prompt_ids: list[int] | None = None,
) -> Iterator[int]:
    """Yield ``max_new_tokens`` token ids one at a time.

    Sampling draws from a CPU generator seeded with ``seed`` (fresh entropy when
    None), so the same seed gives the same text on every device.
    """
    was_training = model.training
    model.eval()
    ctx = model.config.context
    device = next(model.parameters()).device
    ids = list(prompt_ids) or list(empty_prompt_ids or [ord(EMPTY_PROMPT_TEXT)])
    ids = ids[-ctx:]
    generator = torch.Generator()
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(seed)
    cache = KVCache(model.config, 1, device, next(model.parameters()).dtype) if use_cache else None
    try:
        logits = _forward(model, ids, cache, start_pos=0)
        for i in range(max_new_tokens):
            token = pick_token(logits, generator, temperature, top_k, top_p)
            yield token
            ids.append(token)
            if i == max_new_tokens - 1:
                break
            if cache is not None and len(ids) <= ctx:
                logits = _forward(model, [token], cache, start_pos=len(ids) - 1)
            else:
                cache = None  # the window slides: recompute from here on
                logits = _forward(model, ids[-ctx:], None, start_pos=0)
    finally:
        model.train(was_training)


def _forward(model: GPT, ids: list[int], cache: KVCache | None, start_pos: int) -> torch.Tensor:
    device = next(model.parameters()).device
    x = torch.tensor([ids], dtype=torch.long, device=device)  # (1, T)
    with native_cpu_kernels():
        logits, _ = model(x, cache=cache, start_pos=start_pos)  # (1, T, vocab)
    return logits[0, -1]  # (vocab,)


@contextmanager
def native_cpu_kernels() -> Iterator[None]:
    """Use PyTorch's own CPU kernels instead of oneDNN's for the duration (both sampling paths).

    oneDNN builds a kernel for each call: about 20 us for a GELU over 1,024 numbers, four times
    the native kernel. Decoding one token runs dozens of such small operations, so this is
    worth about 10% of the cached path. Set and restored around each forward pass, never across
    a ``yield``, so the caller's code between tokens runs with its own setting.
    """
    before = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = before


def sample_text(
    model: GPT,
    tokenizer: Tokenizer,
    prompt: str,
    max_new_tokens: int,
    **kwargs: object,
) -> str:
    """Prompt plus the generated continuation, as text."""
    prompt_ids = tokenizer.encode(prompt)
    new = list(
        generate(model, prompt_ids, max_new_tokens, empty_prompt_ids=tokenizer.encode(EMPTY_PROMPT_TEXT), **kwargs)
    )
    return tokenizer.decode(prompt_ids + new)


def stream_text(
    model: GPT, tokenizer: Tokenizer, prompt: str, max_new_tokens: int, **kwargs: object
) -> Iterator[str]:
    """Yield decoded text pieces as tokens arrive; a multi-byte character split across
    tokens is held back until it is complete, so every piece is valid text."""
    pending = b""
    ids = tokenizer.encode(prompt)
    for token in generate(model, ids, max_new_tokens, empty_prompt_ids=tokenizer.encode(EMPTY_PROMPT_TEXT), **kwargs):
        pending += tokenizer.token_bytes(token)
        try:
            piece = pending.decode("utf-8")
        except UnicodeDecodeError as exc:
            if exc.reason == "unexpected end of data" and len(pending) - exc.start < 4:
                continue
            piece = pending.decode("utf-8", errors="replace")
        pending = b""
        yield piece
    if pending:
        yield pending.decode("utf-8", errors="replace")


def single_token_id(tokenizer: Tokenizer, word: str) -> int:
    ids = tokenizer.encode(word)
    if len(ids) != 1:
        pieces = [tokenizer.decode([i]) for i in ids]
        raise ValueError(f"{word!r} is {len(ids)} tokens {pieces}, not one; try it with or without a leading space")
    return ids[0]


@torch.no_grad()
def nearest_tokens(model: GPT, tokenizer: Tokenizer, word: str, k: int = 10) -> list[tuple[str, float]]:
    """The k tokens whose embeddings have the highest cosine similarity to ``word``'s.

    >>> nearest_tokens(model, tokenizer, " Holmes", k=2)  # doctest: +SKIP
    [(' Lestrade', 0.41), (' Sherlock', 0.39)]
    """
    token = single_token_id(tokenizer, word)
    # the tokenizer's ids only: a small corpus can leave a model rows that no token names
    emb = F.normalize(model.tok_emb.weight[: tokenizer.vocab_size].float(), dim=-1)  # (ids, C)
    sims = emb @ emb[token]  # (ids,)
    sims[token] = float("-inf")
    k = min(k, sims.numel() - 1)
    values, indices = torch.topk(sims, k)
    return [(tokenizer.decode([int(i)]), float(v)) for v, i in zip(values, indices, strict=True)]


@torch.no_grad()
def token_similarity(model: GPT, tokenizer: Tokenizer, a: str, b: str) -> float:
    """Cosine similarity of two single-token words' embeddings."""
    ia, ib = single_token_id(tokenizer, a), single_token_id(tokenizer, b)
    emb = model.tok_emb.weight.float()
    return float(F.cosine_similarity(emb[ia], emb[ib], dim=0))
