"""Dropout with cheaper masks on the CPU, and causal attention that drops its probabilities with them.

On a CPU, ``F.dropout`` draws its mask with ``bernoulli_``: one call of the generator, a conversion to a
float and a comparison per element, on one thread (PyTorch takes MKL's vectorised generator on Intel CPUs
only). At the series' holmes batch that was 21-23 % of a bf16 training step on an AMD EPYC with AVX512-BF16
(BENCHMARKS.md). :func:`keep_mask` draws 64 random bits per call of the same generator (``random_`` over
int64) and cuts them into four 16-bit numbers, one per element: a quarter of the generator's calls, and
comparisons that vectorise. The probability is kept to 1/65,536 (0.1 drops 6,554 in 65,536: 0.100006). The
mask has ``x``'s dtype, so under bf16 autocast the kept scale is bf16's nearest to 1 / (1 - p) (1.109375 for
0.1: 0.16 % under 1.1111), below bf16's own resolution of 0.4 %.

GPUs and compiled graphs keep ``F.dropout``: their masks are already fused and cheap (Philox on CUDA).
The mask uses the default CPU generator, so ``torch.manual_seed`` (the run's seed) decides it as before.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_BITS = 16  # random bits per element
_LEVELS = 1 << _BITS


def keep_mask(x: torch.Tensor, p: float) -> torch.Tensor:
    """A CPU mask shaped and typed like ``x``: 0 with probability ``p`` (to 1/65,536), else ``1 / (1 - p)``.

    >>> _ = torch.manual_seed(0)
    >>> mask = keep_mask(torch.empty(200_000), 0.1)
    >>> round((mask == 0).float().mean().item(), 2), round(mask.max().item(), 4)
    (0.1, 1.1111)
    """
    n = x.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), None)  # every 64-bit value equally likely
    numbers = words.view(torch.int16)[:n].view(x.shape)  # uniform over [-32768, 32767], one per element
    threshold = round(p * _LEVELS) - _LEVELS // 2  # numbers under it: the dropped share, p
    return (numbers >= threshold).to(x.dtype).mul_(1.0 / (1.0 - p))


def cheap_masks_apply(x: torch.Tensor) -> bool:
    """Whether :func:`dropout` draws its own mask for ``x``: on the CPU, outside ``torch.compile``."""
    return x.device.type == "cpu" and not torch.compiler.is_compiling()


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``F.dropout(x, p, training)``, with :func:`keep_mask`'s masks on the CPU.

    >>> x = torch.ones(4, 8)
    >>> torch.equal(dropout(x, 0.5, training=False), x), dropout(x, 0.0, training=True) is x
    (True, True)
    >>> _ = torch.manual_seed(0)
    >>> sorted(set(dropout(x, 0.5, training=True).flatten().tolist()))
    [0.0, 2.0]
    """
    if not training or p == 0.0:
        return x
    if not cheap_masks_apply(x):
        return F.dropout(x, p, training=True)
    return x * keep_mask(x, p)  # the mask is kept for the backward pass: grad * mask


class Dropout(nn.Dropout):
    """``nn.Dropout`` through :func:`dropout` (the same module state: ``p``, ``training``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float) -> torch.Tensor:
    """Causal self-attention with dropout on its probabilities (training); ``F.scaled_dot_product_attention``
    wherever it takes the dropout itself.

    With ``dropout_p > 0`` PyTorch's CPU attention falls back to its math path (the whole (T, T) matrix,
    masks from ``bernoulli_``); this composes the same math with :func:`keep_mask`'s masks. Shapes:
    q, k, v (B, heads, T, head_dim) -> (B, heads, T, head_dim).

    >>> q, k, v = torch.randn(3, 2, 4, 5, 8).unbind(0)
    >>> torch.allclose(causal_attention(q, k, v, 0.0), F.scaled_dot_product_attention(q, k, v, is_causal=True))
    True
    """
    if dropout_p == 0.0 or not cheap_masks_apply(q):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)
    return dropout(causal_probs(q, k), dropout_p, training=True) @ v  # (B, heads, T, head_dim)


def causal_probs(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Causal attention's probabilities, each query over the keys up to itself: q, k (B, heads, T, head_dim) ->
    (B, heads, T, T), rows summing to 1, zero above the diagonal (what ``tinygpt.inside`` shows).

    >>> q, k = torch.randn(2, 1, 2, 3, 4).unbind(0)
    >>> p = causal_probs(q, k); bool(p.sum(-1).allclose(torch.ones(1, 2, 3))), float(p.triu(1).abs().sum())
    (True, 0.0)
    """
    T = q.shape[-2]
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)  # (B, heads, T, T); scaling q is the smaller pass
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)  # (T, T): keys after the query
    return scores.masked_fill(future, float("-inf")).softmax(dim=-1)  # (B, heads, T, T)
