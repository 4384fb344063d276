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

Attention in bf16 on a CPU is written out too (:func:`causal_attention`): PyTorch's fused CPU kernel runs no faster
in bf16 than in fp32, while the two products of the written-out form go to the bf16 units (docs/SPEEDRUN.md
section 20: the fast recipe's bf16 step 1.11x).
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
    wherever it is the faster way (:func:`written_out`).

    With ``dropout_p > 0`` PyTorch's CPU attention falls back to its math path (the whole (T, T) matrix,
    masks from ``bernoulli_``); this composes the same math with :func:`keep_mask`'s masks. Shapes:
    q, k, v (B, heads, T, head_dim) -> (B, heads, T, head_dim).

    >>> q, k, v = torch.randn(3, 2, 4, 5, 8).unbind(0)
    >>> torch.allclose(causal_attention(q, k, v, 0.0), F.scaled_dot_product_attention(q, k, v, is_causal=True))
    True
    """
    if not written_out(q, dropout_p):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)
    return dropout(causal_probs(q, k), dropout_p, training=True) @ v  # (B, heads, T, head_dim)


def written_out(q: torch.Tensor, dropout_p: float) -> bool:
    """Whether :func:`causal_attention` writes the attention out (:func:`causal_probs`, then the product with the
    values) rather than calling PyTorch's kernel: on a CPU outside ``torch.compile``, with dropout on the
    probabilities (the kernel would take its math path, with dearer masks) or in bf16 (the fused kernel leaves the
    bf16 units idle: the fast recipe's step 1.11x, docs/SPEEDRUN.md section 20).

    >>> written_out(torch.ones(1), 0.0), written_out(torch.ones(1), 0.1), written_out(torch.ones(1).bfloat16(), 0.0)
    (False, True, True)
    """
    return cheap_masks_apply(q) and (dropout_p > 0.0 or q.dtype == torch.bfloat16)


def causal_probs(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Causal attention's probabilities, each query over the keys up to itself: q, k (B, heads, T, head_dim) ->
    (B, heads, T, T), rows summing to 1, zero above the diagonal (what ``tinygpt.inside`` shows). The causal mask
    and the 1/sqrt(head_dim) scale go into the product's own pass (``baddbmm``), and the backward pass needs no mask:
    the softmax's gradient is already zero where its probability is.

    >>> q, k = torch.randn(2, 1, 2, 3, 4).unbind(0)
    >>> p = causal_probs(q, k); bool(p.sum(-1).allclose(torch.ones(1, 2, 3))), float(p.triu(1).abs().sum())
    (True, 0.0)
    """
    B, heads, T, head_dim = q.shape
    future = torch.full((T, T), float("-inf"), dtype=q.dtype, device=q.device).triu(1)  # (T, T): -inf after the query
    scores = torch.baddbmm(future, q.reshape(B * heads, T, head_dim), k.reshape(B * heads, T, head_dim).mT,
                           alpha=head_dim**-0.5)  # (B * heads, T, T)
    return scores.view(B, heads, T, T).softmax(dim=-1)  # (B, heads, T, T)
