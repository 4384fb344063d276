"""The GPT: one :class:`~tinygpt.config.GPTConfig` drives everything.

Pre-norm transformer blocks, tied input/output embedding, causal attention through
``F.scaled_dot_product_attention`` (on a CPU, dropout's masks come from :mod:`tinygpt.dropout`: cheaper
than PyTorch's there). Architecture switches:

- ``pos``: ``rope`` (rotary, precomputed cos/sin tables) or ``learned`` (absolute embedding)
- ``norm``: ``layernorm`` or ``rmsnorm``
- ``mlp``: ``gelu`` (4x hidden), ``swiglu`` (about 8/3 x hidden, rounded up to 64) or ``relu2`` (ReLU squared,
  4x hidden: the speedruns' MLP)
- ``bias``: biases in the MLP and LayerNorm; ``attn_bias``: biases in the attention projections
- ``qk_norm``: queries and keys RMS-normalised per head before RoPE (no weights), as the speedruns do
- ``untied_head``: the output head a matrix of its own, zero at the start (so the untrained loss is exactly
  ln(vocab)), instead of the token embedding's

Generation with a KV cache goes through :meth:`GPT.forward` with ``cache`` and
``start_pos``; see :mod:`tinygpt.sample`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint as activation_checkpoint

from .config import GPTConfig
from .dropout import Dropout, causal_attention


class Linear(nn.Linear):
    """``nn.Linear`` with a faster path for one-token inference (KV-cache decoding).

    For a single row ``x`` with gradients off, ``x @ W^T`` reads a cached, contiguous copy of
    ``W^T`` in memory order: about 2x faster than ``F.linear`` on a CPU, where decoding is
    bound by reading the weights. The copy is rebuilt whenever the weight changes.
    """

    _transposed: tuple[int, int, torch.Tensor] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() < 2 or x.shape[-2] != 1 or torch.is_grad_enabled():
            return F.linear(x, self.weight, self.bias)
        weight, cached = self.weight, self._transposed
        if cached is None or cached[0] != weight._version or cached[1] != weight.data_ptr():
            cached = self._transposed = (weight._version, weight.data_ptr(), weight.detach().t().contiguous())
        y = torch.matmul(x, cached[2])  # (..., 1, out)
        return y if self.bias is None else y.add_(self.bias)


#: The norms' epsilons (an export's config carries them: tinygpt/export/).
RMS_NORM_EPS = 1e-6
LAYER_NORM_EPS = 1e-5


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = RMS_NORM_EPS) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def make_norm(config: GPTConfig) -> nn.Module:
    if config.norm == "rmsnorm":
        return RMSNorm(config.d_model)
    return nn.LayerNorm(config.d_model, eps=LAYER_NORM_EPS, bias=config.bias)


Rope = tuple[torch.Tensor, torch.Tensor]  # the (cos, sin) tables of rotary embeddings, (T, head_dim) each


def rope_tables(head_dim: int, length: int, base: float) -> Rope:
    """cos and signed sin tables, each (length, head_dim), for rotary embeddings.

    Dimension i of the first half pairs with dimension i of the second half and both turn by
    the same angle, so ``cos`` repeats its half and ``sin`` carries the rotation's sign:
    ``cos = [c, c]``, ``sin = [-s, s]``.
    """
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(length, dtype=torch.float32), inv_freq)  # (T, hd/2)
    cos, sin = angles.cos(), angles.sin()
    return torch.cat((cos, cos), dim=-1), torch.cat((-sin, sin), dim=-1)  # (T, hd) each


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (first half, second half) of the head dimension.

    ``[x1, x2] -> [x1 c - x2 s, x2 c + x1 s]``, computed as ``x * cos + swap_halves(x) * sin``
    in four tensor operations (the per-op cost dominates one-token decoding).
    x: (..., T, head_dim); cos, sin: (T, head_dim) from ``rope_tables``.

    >>> cos, sin = rope_tables(2, 2, 10000.0)  # position 1 turns by 1 radian
    >>> apply_rope(torch.tensor([[1.0, 0.0], [1.0, 0.0]]), cos, sin)
    tensor([[1.0000, 0.0000],
            [0.5403, 0.8415]])
    """
    if cos.dtype != x.dtype:
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin


class KVCache:
    """Keys and values of past positions, per layer, preallocated to the context length."""

    def __init__(self, config: GPTConfig, batch: int, device: torch.device, dtype: torch.dtype) -> None:
        shape = (batch, config.n_heads, config.context, config.head_dim)  # (B, heads, T_max, head_dim)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layers)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layers)]
        self.length = 0

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        end = start + k.shape[2]
        self.keys[layer][:, :, start:end] = k
        self.values[layer][:, :, start:end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig, layer: int) -> None:
        super().__init__()
        self.config = config
        self.layer = layer
        self.qkv = Linear(config.d_model, 3 * config.d_model, bias=config.attn_bias)
        self.proj = Linear(config.d_model, config.d_model, bias=config.attn_bias)
        self.proj.residual_out = True
        self.dropout = config.attention_dropout

    def heads(self, x: torch.Tensor, rope: Rope | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values per head, as attention sees them (QK-norm and RoPE applied):
        x (B, T, C) -> q, k, v (B, heads, T, head_dim) each."""
        B, T, _ = x.shape
        h, hd = self.config.n_heads, self.config.head_dim
        qkv = self.qkv(x).view(B, T, 3, h, hd).transpose(1, 3)  # (B, heads, 3, T, head_dim)
        qk, v = qkv[:, :, :2], qkv[:, :, 2]  # (B, heads, 2, T, head_dim), (B, heads, T, head_dim)
        if self.config.qk_norm:
            qk = F.rms_norm(qk, (hd,))  # each query and key to RMS 1
        if rope is not None:
            cos, sin = rope
            qk = apply_rope(qk, cos, sin)  # one call rotates queries and keys
        return qk[:, :, 0], qk[:, :, 1], v

    def forward(self, x: torch.Tensor, rope: Rope | None, cache: KVCache | None = None, start_pos: int = 0) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.heads(x, rope)  # (B, heads, T, head_dim) each
        if cache is not None:
            k, v = cache.update(self.layer, k, v, start_pos)  # (B, heads, start+T, head_dim)
        if cache is None or start_pos == 0:
            y = causal_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0)
        elif T == 1:
            y = F.scaled_dot_product_attention(q, k, v)  # one new query sees every cached key
        else:
            # New queries sit at positions start_pos.. and may see every cached key up to themselves.
            mask = torch.ones(T, k.shape[2], dtype=torch.bool, device=x.device).tril(diagonal=start_pos)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        hidden = config.mlp_hidden
        self.kind = config.mlp
        if config.mlp == "swiglu":
            self.gate = Linear(config.d_model, hidden, bias=config.bias)
        self.up = Linear(config.d_model, hidden, bias=config.bias)
        self.down = Linear(hidden, config.d_model, bias=config.bias)
        self.down.residual_out = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "swiglu":
            return self.down(F.silu(self.gate(x)) * self.up(x))
        if self.kind == "relu2":
            return self.down(F.relu(self.up(x)).square())
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, config: GPTConfig, layer: int) -> None:
        super().__init__()
        self.norm1 = make_norm(config)
        self.attn = CausalSelfAttention(config, layer)
        self.norm2 = make_norm(config)
        self.mlp = MLP(config)
        self.drop = Dropout(config.dropout)

    def forward(self, x: torch.Tensor, rope: Rope | None, cache: KVCache | None = None, start_pos: int = 0) -> torch.Tensor:
        if cache is not None:  # decoding: eval mode, no dropout, skip the module calls
            x = x + self.attn(self.norm1(x), rope, cache, start_pos)
            return x + self.mlp(self.norm2(x))
        x = x + self.drop(self.attn(self.norm1(x), rope, cache, start_pos))
        return x + self.drop(self.mlp(self.norm2(x)))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_emb = nn.Embedding(config.context, config.d_model) if config.pos == "learned" else None
        self.drop = Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config, i) for i in range(config.n_layers))
        self.norm_f = make_norm(config)
        self.head = Linear(config.d_model, config.vocab_size, bias=False)
        if not config.untied_head:
            self.head.weight = self.tok_emb.weight  # tied input/output embedding
        if config.pos == "rope":
            cos, sin = rope_tables(config.head_dim, config.context, config.rope_base)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        self.gradient_checkpointing = False
        self.apply(self._init_weights)
        if config.untied_head:
            nn.init.zeros_(self.head.weight)  # every token equally likely at first: loss ln(vocab)

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            std = 0.02
            if getattr(module, "residual_out", False):
                std = 0.02 / math.sqrt(2 * self.config.n_layers)
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def set_dropout(self, on: bool) -> None:
        """Dropout as configured (``on``) or none, in every module that drops (the run option ``dropout_start``
        turns it on part-way; evaluation mode drops nothing either way).

        >>> from tinygpt.presets import model_config
        >>> model = GPT(model_config("tiny", vocab_size=300, context=16, dropout=0.1, attn_dropout=0.05))
        >>> model.set_dropout(False); model.drop.p, model.blocks[0].attn.dropout
        (0.0, 0.0)
        >>> model.set_dropout(True); model.blocks[1].drop.p, model.blocks[1].attn.dropout
        (0.1, 0.05)
        """
        for module in self.modules():
            if isinstance(module, nn.Dropout):
                module.p = self.config.dropout if on else 0.0
            elif isinstance(module, CausalSelfAttention):
                module.dropout = self.config.attention_dropout if on else 0.0

    def num_params(self) -> int:
        """Unique parameters (the tied embedding counted once)."""
        return sum(p.numel() for p in self.parameters())

    def param_breakdown(self) -> dict[str, int]:
        """Parameter counts by part: embedding, one block (attention, MLP, norms), all blocks, final norm and
        an untied head."""
        block = self.blocks[0]
        attn = sum(p.numel() for p in block.attn.parameters())
        mlp = sum(p.numel() for p in block.mlp.parameters())
        norms = sum(p.numel() for p in block.norm1.parameters()) + sum(p.numel() for p in block.norm2.parameters())
        return {
            "embedding": self.tok_emb.weight.numel(),
            "position_embedding": self.pos_emb.weight.numel() if self.pos_emb is not None else 0,
            "block": attn + mlp + norms,
            "block_attention": attn,
            "block_mlp": mlp,
            "block_norms": norms,
            "blocks": sum(p.numel() for p in self.blocks.parameters()),
            "final_norm": sum(p.numel() for p in self.norm_f.parameters()),
            "head": self.head.weight.numel() if self.config.untied_head else 0,
            "total": self.num_params(),
        }

    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        *,
        cache: KVCache | None = None,
        start_pos: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """idx: (B, T) token ids. Returns logits (B, T, vocab) and the mean loss when targets are given."""
        B, T = idx.shape
        if start_pos + T > self.config.context:
            raise ValueError(f"sequence of {start_pos + T} tokens exceeds the context of {self.config.context}")
        x = self.tok_emb(idx)  # (B, T, C)
        rope = None
        if self.pos_emb is not None:
            pos = torch.arange(start_pos, start_pos + T, device=idx.device)
            x = x + self.pos_emb(pos)  # (B, T, C)
        else:
            rope = (self.rope_cos[start_pos : start_pos + T], self.rope_sin[start_pos : start_pos + T])
        x = self.drop(x)
        for block in self.blocks:
            if self.gradient_checkpointing and self.training and cache is None:
                x = activation_checkpoint(block, x, rope, use_reentrant=False)
            else:
                x = block(x, rope, cache, start_pos)
        x = self.norm_f(x)
        logits = self.head(x)  # (B, T, vocab)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss
