"""The optimizers and learning-rate schedules of a run (its ``optimizer`` and ``lr_schedule`` options).

Optimizers: ``adamw`` (the series': AdamW, betas 0.9/0.95, weight decay on 2-D weights only) or ``muon``
(PyTorch's :class:`torch.optim.Muon`, momentum orthogonalised by Newton-Schulz, for the hidden matrices of
the transformer blocks; AdamW for the embedding, the tied head, norms and biases, as the speedrun does).

Schedules, each after a linear warmup of ``warmup_steps()``, end at ``min_lr_ratio`` of the peak at the last
step: ``cosine`` (the series'), ``linear``, and ``wsd`` (warmup, stable at the peak, then a linear decay over
the last ``decay_fraction`` of the steps).

>>> from tinygpt.run_config import TrainConfig
>>> config = TrainConfig(steps=1000, warmup=100, lr_schedule="wsd", decay_fraction=0.2, min_lr_ratio=0.0)
>>> [round(lr_factor(step, config), 3) for step in (0, 99, 500, 800, 900, 1000)]
[0.01, 1.0, 1.0, 1.0, 0.5, 0.0]
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch
from torch import nn

from . import device as dev

if TYPE_CHECKING:
    from .run_config import TrainConfig

#: AdamW's betas: the series' (0.9, 0.95).
ADAMW_BETAS = (0.9, 0.95)


def lr_factor(step: int, config: TrainConfig) -> float:
    """The schedule's multiplier of each optimizer's peak learning rate at ``step`` (0-based): a linear
    warmup to 1, then ``config.lr_schedule`` down to ``min_lr_ratio`` at the last step."""
    warmup = config.warmup_steps()
    if warmup and step < warmup:
        return (step + 1) / warmup
    floor = config.min_lr_ratio
    if config.lr_schedule == "wsd":  # stable until the decay's share of the steps, warmup not included
        decay_start = max(warmup, config.steps - round(config.decay_fraction * config.steps))
        progress = min(1.0, max(0, step - decay_start) / max(1, config.steps - decay_start))
        return 1.0 - (1.0 - floor) * progress
    progress = min(1.0, (step - warmup) / max(1, config.steps - warmup))
    if config.lr_schedule == "linear":
        return 1.0 - (1.0 - floor) * progress
    return floor + 0.5 * (1.0 - floor) * (1 + math.cos(math.pi * progress))  # cosine


def lr_at(step: int, config: TrainConfig) -> float:
    """AdamW's learning rate at ``step`` (the one the metrics log): ``lr`` times :func:`lr_factor`."""
    return config.lr * lr_factor(step, config)


class OptimizerSet:
    """Several torch optimizers stepped as one: Muon for the hidden matrices and AdamW for the rest. It has
    what the training loop uses of an optimizer (param_groups, step, zero_grad, state_dict)."""

    def __init__(self, *optimizers: torch.optim.Optimizer) -> None:
        self.optimizers = optimizers

    @property
    def param_groups(self) -> list[dict]:
        return [group for opt in self.optimizers for group in opt.param_groups]

    def step(self) -> None:
        for opt in self.optimizers:
            opt.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        return {"optimizers": [opt.state_dict() for opt in self.optimizers],
                "kinds": [type(opt).__name__ for opt in self.optimizers]}

    def load_state_dict(self, state: dict) -> None:
        for opt, part in zip(self.optimizers, state["optimizers"], strict=True):
            opt.load_state_dict(part)


def load_optimizer_state(optimizer: Optimizer, state: dict) -> None:
    """Restore a checkpoint's optimizer state; ValueError when it was saved by other optimizers."""
    saved = state.get("kinds", ["AdamW"])
    kinds = [type(opt).__name__ for opt in parts(optimizer)]
    if saved != kinds:
        raise ValueError(f"the checkpoint's optimizer state is {' + '.join(saved)}'s but this run "
                         f"uses {' + '.join(kinds)}; cannot resume")
    held = [group["lr"] for group in optimizer.param_groups]
    optimizer.load_state_dict(state)
    for group, lr in zip(optimizer.param_groups, held, strict=True):
        if isinstance(lr, torch.Tensor):  # the tensor a compiled step reads stays the one, at the saved rate
            lr.fill_(float(group["lr"]))
            group["lr"] = lr


Optimizer = torch.optim.Optimizer | OptimizerSet


def parts(optimizer: Optimizer) -> tuple[torch.optim.Optimizer, ...]:
    """The torch optimizers behind ``optimizer`` (one for AdamW)."""
    return optimizer.optimizers if isinstance(optimizer, OptimizerSet) else (optimizer,)


def hidden_matrices(model: nn.Module) -> Iterator[nn.Parameter]:
    """The 2-D weights inside the transformer blocks (attention and MLP matrices): Muon's share."""
    for name, param in model.named_parameters():
        if param.requires_grad and param.dim() == 2 and ".blocks." in f".{name}":
            yield param


def peak_lr(value: float, config: TrainConfig, device: torch.device) -> float | torch.Tensor:
    """A learning rate as the optimizer holds it: a float, or with ``compile_optimizer`` a 0-dim tensor on the
    device, which :func:`set_lr` changes in place, so that the schedule neither recompiles the compiled step
    nor goes stale in a captured CUDA graph."""
    return torch.tensor(value, device=device) if compiled_step(config) else value


def compiled_step(config: TrainConfig) -> bool:
    """Whether the run's optimizer step runs compiled (``compile`` and ``compile_optimizer``)."""
    return config.compile and config.compile_optimizer


def adamw(params: list[nn.Parameter], config: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on 2-D weights (matrices, embeddings) only."""
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # fused on CUDA, and wherever the learning rate is a tensor (foreach refuses one); elsewhere the
    # multi-tensor (foreach) version: the CPU's fused AdamW measured within noise of foreach on a holmes step
    # here. (Either imports torch._dynamo on first use, 1.5-2.5 s: see ``tinygpt.train.warm_up``.)
    extra = {"fused": True} if device.type == "cuda" or compiled_step(config) else {"foreach": True}
    return torch.optim.AdamW(groups, lr=peak_lr(config.lr, config, device), betas=ADAMW_BETAS, **extra)


def newton_schulz(g: torch.Tensor, coefficients: tuple[float, float, float], steps: int, eps: float,
                  dtype: torch.dtype) -> torch.Tensor:
    """Muon's orthogonalisation of an update, or of a stack of same-shaped updates at once, in ``dtype``, as
    torch's (``torch.optim._muon``) does one in bfloat16: each scaled to spectral norm <= 1 (by its Frobenius
    norm), then ``steps`` quintic Newton-Schulz iterations on the wide side. A stack takes the same few
    batched products whatever its size: a few launches a step instead of a chain per matrix.

    g: (rows, cols) or (B, rows, cols) -> the same shape
    """
    a, b, c = coefficients
    x = g.to(dtype).reshape(-1, *g.shape[-2:])  # (B, rows, cols)
    tall = g.size(-2) > g.size(-1)
    if tall:
        x = x.mT  # (B, cols, rows): the Gram matrices below are the smaller ones
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)
    for _ in range(steps):
        gram = x @ x.mT  # (B, n, n)
        x = torch.baddbmm(x, torch.baddbmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return (x.mT if tall else x).reshape(g.shape).to(g.dtype)


class Muon(torch.optim.Muon):
    """PyTorch's Muon (its state, ``momentum_buffer``, and groups are torch's), with the matrices of one shape
    orthogonalised together (:func:`newton_schulz` on their stack), in ``ns_dtype``: bfloat16 where the device
    has bf16 units, as torch's own step; fp32 on a CPU without them, which emulates bf16 at ~45x the fp32 cost
    (a 1024x256 update: 634 ms against 14 ms on a 2-core AVX2 EPYC; a holmes step 12.5 s)."""

    def __init__(self, params: list[nn.Parameter], *, ns_dtype: torch.dtype, **options: object) -> None:
        super().__init__(params, **options)
        self.ns_dtype = ns_dtype

    @torch.no_grad()
    def step(self, closure: None = None) -> None:  # type: ignore[override]
        """One update of every matrix: the momentum buffers and the weights moved by multi-tensor (foreach) ops,
        and one Newton-Schulz chain per shape, so a step is a few dozen kernel launches whatever the matrix count."""
        for group in self.param_groups:
            live = [p for p in group["params"] if p.grad is not None]
            if not live:
                continue
            updates = self.momentum_updates(live, group)
            by_shape: dict[torch.Size, list[int]] = {}
            for i, param in enumerate(live):
                by_shape.setdefault(param.shape, []).append(i)
            for (rows, cols), members in by_shape.items():
                stacked = torch.stack([updates[i] for i in members])  # (B, rows, cols)
                ortho = newton_schulz(stacked, group["ns_coefficients"], group["ns_steps"], group["eps"],
                                      self.ns_dtype)
                params, lr = [live[i] for i in members], group["lr"]  # lr: a float or a 0-dim tensor
                if group["weight_decay"]:
                    torch._foreach_mul_(params, 1 - lr * group["weight_decay"])
                # torch's "original" scale: sqrt(rows / cols) for a tall matrix
                ortho.mul_(-lr * math.sqrt(max(1, rows / cols)))
                torch._foreach_add_(params, list(ortho.unbind(0)))

    def momentum_updates(self, params: list[nn.Parameter], group: dict) -> list[torch.Tensor]:
        """Each parameter's momentum buffer moved by its gradient; the updates to orthogonalise (Nesterov's)."""
        momentum = group["momentum"]
        grads = [p.grad for p in params]
        buffers = [self.state[p].setdefault("momentum_buffer", torch.zeros_like(p.grad)) for p in params]
        torch._foreach_lerp_(buffers, grads, 1 - momentum)
        return torch._foreach_lerp(grads, buffers, momentum) if group["nesterov"] else buffers


def make_optimizer(model: nn.Module, config: TrainConfig, device: torch.device) -> Optimizer:
    """The run's optimizer: AdamW over every parameter, or Muon over the hidden matrices (decoupled weight
    decay ``muon_weight_decay``, none by default: its normalised updates keep their scale) with AdamW over the
    rest."""
    params = [p for p in model.parameters() if p.requires_grad]
    if config.optimizer == "adamw":
        return adamw(params, config, device)
    matrices = list(hidden_matrices(model))
    chosen = {id(p) for p in matrices}
    fast_bf16 = dev.resolve_precision("auto", device) == "bf16"  # the device's own units (tinygpt.device)
    muon = Muon(matrices, lr=peak_lr(config.muon_lr, config, device), momentum=config.muon_momentum,
                weight_decay=config.muon_weight_decay, ns_steps=config.muon_ns_steps,
                ns_dtype=torch.bfloat16 if fast_bf16 else torch.float32)
    return OptimizerSet(muon, adamw([p for p in params if id(p) not in chosen], config, device))


def set_lr(optimizer: Optimizer, step: int, config: TrainConfig) -> None:
    """Every group's learning rate at ``step``: its optimizer's peak (``muon_lr`` for Muon, ``lr`` for
    AdamW) times :func:`lr_factor`."""
    factor = lr_factor(step, config)
    for opt in parts(optimizer):
        peak = config.muon_lr if isinstance(opt, torch.optim.Muon) else config.lr
        for group in opt.param_groups:
            if isinstance(group["lr"], torch.Tensor):  # compile_optimizer: the tensor the compiled step reads
                group["lr"].fill_(peak * factor)
            else:
                group["lr"] = peak * factor


def compile_step(optimizer: Optimizer, mode: str) -> None:
    """Run ``optimizer``'s step through ``torch.compile`` in ``mode`` (the model's own): its foreach ops fused,
    and with ``reduce-overhead`` on a GPU replayed as a CUDA graph like the forward and backward passes.
    The learning rates must be tensors (:func:`peak_lr`), else each change of the schedule recompiles."""
    optimizer.step = torch.compile(optimizer.step, mode=None if mode == "default" else mode)  # type: ignore[method-assign]
