"""Inside a trained GPT, from one forward pass with its activations kept: every layer's and head's attention
pattern, each token's surprise (loss) with the model's top next-token guesses, the logit lens (each layer's
residual stream read through the final norm and the output head) and the heads' roles as scores (previous
token, induction, first token, entropy). The dashboard's Inside view and ``tinygpt inspect`` draw these
numbers; nothing here trains.

The forward pass is the model's own (:meth:`GPT.forward`); hooks keep each block's output and recompute
each attention's probabilities from its queries and keys (:meth:`CausalSelfAttention.heads`,
:func:`tinygpt.dropout.causal_probs`), so every architecture the library builds (RoPE or learned positions,
QK-norm, LayerNorm or RMSNorm) is seen as it computes.

>>> from tinygpt.presets import model_config
>>> torch.manual_seed(0); model = GPT(model_config("tiny", vocab_size=64, context=32)).eval()  # doctest: +ELLIPSIS
<...>
>>> seen = look_inside(model, torch.randint(0, 64, (12,)))
>>> tuple(seen.attention.shape), tuple(seen.lens_top.shape), len(seen.token_loss)
((4, 4, 12, 12), (5, 12), 11)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .dropout import causal_probs
from .model import GPT, CausalSelfAttention
from .records import HEAD_SCORES

TOP_K = 5
PROBE_SEED = 1234  # the induction probe's random tokens: the same at every evaluation of every run


@dataclass
class Inside:
    """What one passage of T tokens shows of a model (L layers, H heads, V ids); float32 on the CPU."""

    tokens: list[int]
    attention: torch.Tensor  # (L, H, T, T): query x key, rows sum to 1, zero above the diagonal
    logits: torch.Tensor  # (T, V): the model's output
    token_loss: torch.Tensor  # (T-1,): nats, predicting token t+1 at position t
    top_ids: torch.Tensor  # (T, TOP_K): the model's likeliest next tokens at each position
    top_probs: torch.Tensor  # (T, TOP_K)
    lens_top: torch.Tensor  # (L+1, T): the top token of each residual stream (embeddings, then each block)
    lens_next_prob: torch.Tensor  # (L+1, T-1): each stream's probability of the actual next token
    lens_logits_last: torch.Tensor  # (T, V): the last stream through the norm and head: equals ``logits``

    @property
    def mean_loss(self) -> float:
        return float(self.token_loss.mean())


def keep_activations(model: GPT) -> tuple[list[torch.Tensor], list[torch.Tensor], list]:
    """Hooks that keep each block's output stream (B, T, C) and each attention's probabilities (B, H, T, T)."""
    streams: list[torch.Tensor] = []
    patterns: list[torch.Tensor] = []

    def attention_hook(module: CausalSelfAttention, args: tuple, _: torch.Tensor) -> None:
        q, k, _v = module.heads(args[0], args[1])  # (B, H, T, hd) each
        patterns.append(causal_probs(q.float(), k.float()))

    def block_hook(_module: torch.nn.Module, _args: tuple, out: torch.Tensor) -> None:
        streams.append(out.float())

    handles = [b.attn.register_forward_hook(attention_hook) for b in model.blocks]
    handles += [b.register_forward_hook(block_hook) for b in model.blocks]
    return streams, patterns, handles


@torch.no_grad()
def forward_kept(model: GPT, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """idx (B, T) -> logits (B, T, V), attention (B, L, H, T, T), the streams [(B, T, C)] x (L+1): the
    embeddings' (positions added) first, then each block's output."""
    embedded: list[torch.Tensor] = []
    first = model.drop.register_forward_hook(lambda _m, _a, out: embedded.append(out.float()))
    streams, patterns, handles = keep_activations(model)
    try:
        logits, _ = model(idx)
    finally:
        for handle in [first, *handles]:
            handle.remove()
    return logits.float(), torch.stack(patterns, dim=1), [embedded[0], *streams]


@torch.no_grad()
def read_lens(model: GPT, stream: torch.Tensor) -> torch.Tensor:
    """The logit lens: a residual stream (T, C) read as the output would be -> logits (T, V)."""
    return model.head(model.norm_f(stream.to(model.head.weight.dtype))).float()


@torch.no_grad()
def look_inside(model: GPT, tokens: torch.Tensor) -> Inside:
    """One passage (T,) of at most the model's context, in evaluation mode (no dropout)."""
    if tokens.dim() != 1 or not 2 <= tokens.numel() <= model.config.context:
        raise ValueError(f"a passage is 2 to {model.config.context} tokens (the model's context), "
                         f"got {tokens.numel()}")
    was_training = model.training
    model.eval()
    try:
        device = next(model.parameters()).device
        logits, attention, streams = forward_kept(model, tokens.view(1, -1).to(device))
        lens = [read_lens(model, s[0]) for s in streams]  # (L+1) x (T, V)
    finally:
        model.train(was_training)
    logits, ids = logits[0].cpu(), tokens.cpu()
    probs = logits.softmax(-1)  # (T, V)
    top_probs, top_ids = probs.topk(min(TOP_K, probs.shape[-1]), dim=-1)  # (T, K)
    nxt = ids[1:]  # (T-1,)
    lens_probs = torch.stack([lg.cpu().softmax(-1) for lg in lens])  # (L+1, T, V)
    return Inside(
        tokens=ids.tolist(), attention=attention[0].cpu(), logits=logits,
        token_loss=F.cross_entropy(logits[:-1], nxt, reduction="none"),
        top_ids=top_ids, top_probs=top_probs,
        lens_top=lens_probs.argmax(-1),
        lens_next_prob=lens_probs[:, :-1].gather(-1, nxt.view(1, -1, 1).expand(len(lens), -1, 1))[..., 0],
        lens_logits_last=lens[-1].cpu(),
    )


# -- head roles -----------------------------------------------------------------------------------------
def previous_token_score(attention: torch.Tensor) -> torch.Tensor:
    """(..., T, T) -> (...): mean attention from each position t >= 1 to t-1.

    >>> a = torch.zeros(4, 4); a[0, 0] = 1; a[1:, :-1] = torch.eye(3)  # each token looks at the one before
    >>> previous_token_score(a).item(), first_token_score(a).item()
    (1.0, 0.3333333432674408)
    """
    return attention.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)


def first_token_score(attention: torch.Tensor) -> torch.Tensor:
    """(..., T, T) -> (...): mean attention from each position t >= 1 to the first token."""
    return attention[..., 1:, 0].mean(-1)


def entropy_score(attention: torch.Tensor) -> torch.Tensor:
    """(..., T, T) -> (...): mean entropy of each position's attention, in nats (0: one key; ln(t+1): even)."""
    p = attention.clamp_min(1e-12)
    return -(attention * p.log()).sum(-1).mean(-1)


def induction_score(attention: torch.Tensor, half: int) -> torch.Tensor:
    """(..., 2n, 2n) over a sequence of n tokens repeated twice -> (...): mean attention from each token's
    second occurrence (positions n..2n-1) to the token after its first occurrence (t - n + 1).

    >>> n = 3; a = torch.zeros(6, 6); a[0, 0] = 1
    >>> for t in range(1, 6): a[t, t - n + 1 if t >= n else 0] = 1
    >>> induction_score(a, n).item()
    1.0
    """
    n = half
    return attention.diagonal(offset=-(n - 1), dim1=-2, dim2=-1)[..., 1:].mean(-1)


def probe_half(context: int) -> int:
    """The probe's tokens before they repeat, for a model of this context (the probe is twice as long)."""
    return min(64, context // 2)


def induction_probe(vocab_size: int, half: int, batch: int = 4) -> torch.Tensor:
    """The fixed probe: ``batch`` sequences of ``half`` random tokens, each repeated twice -> (batch, 2*half)."""
    generator = torch.Generator().manual_seed(PROBE_SEED)
    first = torch.randint(0, vocab_size, (batch, half), generator=generator)
    return torch.cat([first, first], dim=1)


@torch.no_grad()
def head_scores(model: GPT, vocab_size: int | None = None, half: int | None = None) -> dict[str, torch.Tensor]:
    """Each head's role scores on the induction probe -> {score: (L, H)}: cheap, one forward pass of a small
    batch, so a run can record them at every evaluation."""
    half = half or probe_half(model.config.context)
    probe = induction_probe(vocab_size or model.config.vocab_size, half)
    was_training = model.training
    model.eval()
    try:
        _, attention, _ = forward_kept(model, probe.to(next(model.parameters()).device))  # (B, L, H, T, T)
    finally:
        model.train(was_training)
    attention = attention.cpu()
    scores = (previous_token_score(attention), induction_score(attention, half), first_token_score(attention),
              entropy_score(attention))  # each (B, L, H)
    return {name: score.mean(0) for name, score in zip(HEAD_SCORES, scores, strict=True)}


@torch.no_grad()
def embedding_pca(model: GPT) -> tuple[torch.Tensor, list[float]]:
    """The token embeddings (V, C) on their first two principal components -> (V, 2), and the share of the
    variance each explains.

    >>> from tinygpt.presets import model_config
    >>> torch.manual_seed(0); model = GPT(model_config("tiny", vocab_size=64, context=32))  # doctest: +ELLIPSIS
    <...>
    >>> xy, shares = embedding_pca(model); tuple(xy.shape), shares[0] >= shares[1]
    ((64, 2), True)
    """
    weights = model.tok_emb.weight.float().cpu()
    centred = weights - weights.mean(0)  # (V, C)
    _, singular, v = torch.linalg.svd(centred, full_matrices=False)  # v: (C, C), rows the components
    total = float((singular**2).sum()) or 1.0
    return centred @ v[:2].T, [float(s**2) / total for s in singular[:2]]


def score_table(scores: dict[str, torch.Tensor]) -> list[str]:
    """The scores as text, one line per head (what ``tinygpt inspect`` prints)."""
    layers, heads = next(iter(scores.values())).shape
    lines = ["layer head " + " ".join(f"{name:>14}" for name in scores)]
    for layer in range(layers):
        for head in range(heads):
            lines.append(f"{layer:>5} {head:>4} " + " ".join(f"{float(s[layer, head]):>14.4f}" for s in scores.values()))
    return lines


def bits(nats: float) -> float:
    return nats / math.log(2)
