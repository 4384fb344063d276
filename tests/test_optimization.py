"""The optimizers and schedules of tinygpt/optimization.py: known values of each schedule, Muon's update against
a reference written here from its definition, which parameters each optimizer gets, and a Muon run that learns."""

from __future__ import annotations

import math

import pytest
import torch

from tinygpt import optimization
from tinygpt.device import cpu_has_bf16, resolve_precision
from tinygpt.model import GPT
from tinygpt.optimization import (
    Muon,
    OptimizerSet,
    compile_step,
    hidden_matrices,
    load_optimizer_state,
    lr_at,
    lr_factor,
    make_optimizer,
    newton_schulz,
    set_lr,
)
from tinygpt.presets import model_config
from tinygpt.run_config import TrainConfig
from tinygpt.train import train

from .test_train import Recorder


def config(**options: object) -> TrainConfig:
    return TrainConfig(steps=1000, warmup=100, min_lr_ratio=0.1, **options).validate()


@pytest.mark.parametrize("schedule, expected", [
    # step:       0     99    100   550     800   900    1000
    ("cosine", [0.01, 1.0, 1.0, 0.55, 0.2053, 0.1271, 0.1]),
    ("linear", [0.01, 1.0, 1.0, 0.55, 0.3, 0.2, 0.1]),
    ("wsd", [0.01, 1.0, 1.0, 1.0, 1.0, 0.55, 0.1]),  # decay over the last 20%: steps 800-1000
])
def test_each_schedule_at_known_steps(schedule, expected):
    cfg = config(lr_schedule=schedule)
    got = [lr_factor(step, cfg) for step in (0, 99, 100, 550, 800, 900, 1000)]
    assert got == pytest.approx(expected, abs=1e-4)
    assert lr_at(550, cfg) == pytest.approx(cfg.lr * expected[3])


def test_wsd_decay_fraction_and_a_warmup_longer_than_the_stable_part():
    assert lr_factor(500, config(lr_schedule="wsd", decay_fraction=0.5)) == pytest.approx(1.0)
    assert lr_factor(750, config(lr_schedule="wsd", decay_fraction=0.5)) == pytest.approx(0.55)
    # the decay never starts before the warmup ends: 95% decay with 100 warmup steps decays over 100-1000
    assert lr_factor(100, config(lr_schedule="wsd", decay_fraction=0.95)) == pytest.approx(1.0)
    assert lr_factor(550, config(lr_schedule="wsd", decay_fraction=0.95)) == pytest.approx(0.55)


@pytest.mark.parametrize("name, value, message", [
    ("optimizer", "sgd", "optimizer must be one of adamw, muon; got 'sgd'"),
    ("lr_schedule", "step", "lr_schedule must be one of cosine, wsd, linear; got 'step'"),
    ("decay_fraction", 0, "decay_fraction must be in (0, 1], got 0.0"),
    ("muon_momentum", 1, "muon_momentum must be in [0, 1), got 1.0"),
    ("muon_weight_decay", 1.5, "muon_weight_decay must be in [0, 1], got 1.5"),
    ("muon_ns_steps", 0, "muon_ns_steps must be in [1, 20], got 0"),
])
def test_bad_values_are_refused_naming_the_option(name, value, message):
    with pytest.raises(ValueError) as info:
        TrainConfig(**{name: value}).validate()
    assert str(info.value) == message


def tiny_model() -> GPT:
    torch.manual_seed(0)
    return GPT(model_config("tiny", "series", vocab_size=64, context=8))


def test_muon_ns_steps_is_the_number_of_newton_schulz_iterations(monkeypatch):
    seen = []
    real = optimization.newton_schulz
    monkeypatch.setattr(optimization, "newton_schulz", lambda *a: seen.append(a[2]) or real(*a))
    model = tiny_model()
    for steps in (5, 3):
        optimizer = make_optimizer(model, TrainConfig(optimizer="muon", muon_ns_steps=steps), torch.device("cpu"))
        for p in model.parameters():
            p.grad = torch.ones_like(p)
        optimizer.step()
    assert set(seen[:4]) == {5} and set(seen[4:]) == {3} and len(seen) == 8  # 4 shapes a step


def test_muon_takes_the_blocks_matrices_and_adamw_the_rest():
    model = tiny_model()
    optimizer = make_optimizer(model, TrainConfig(optimizer="muon"), torch.device("cpu"))
    assert isinstance(optimizer, OptimizerSet)
    muon, adamw = optimizer.optimizers
    assert isinstance(muon, torch.optim.Muon) and isinstance(adamw, torch.optim.AdamW)
    names = {id(p): n for n, p in model.named_parameters()}
    muon_names = {names[id(p)] for g in muon.param_groups for p in g["params"]}
    adamw_names = {names[id(p)] for g in adamw.param_groups for p in g["params"]}
    assert muon_names == {f"blocks.{i}.{m}.weight" for i in range(4)
                          for m in ("attn.qkv", "attn.proj", "mlp.up", "mlp.down")}
    assert "tok_emb.weight" in adamw_names and not muon_names & adamw_names  # the tied embedding: AdamW's
    assert muon_names | adamw_names == set(names.values())
    assert muon.param_groups[0]["weight_decay"] == 0.0 and muon.param_groups[0]["momentum"] == 0.95
    decayed, _ = make_optimizer(model, TrainConfig(optimizer="muon", muon_weight_decay=0.05), torch.device("cpu")).optimizers
    assert decayed.param_groups[0]["weight_decay"] == 0.05
    # bfloat16 only where the device has the units for it (the same decision as precision auto)
    fast_bf16 = resolve_precision("auto", torch.device("cpu")) == "bf16"
    assert muon.ns_dtype == (torch.bfloat16 if fast_bf16 else torch.float32)


def test_the_fp32_muon_step_is_not_the_emulated_bf16_one():
    """On a CPU without bf16 units, torch's bfloat16 orthogonalisation is emulated: ours in fp32 is several
    times faster on a holmes-sized matrix (45x measured on a 2-core AVX2 EPYC)."""
    if cpu_has_bf16():  # precision auto picks bf16 here (the same rule)
        pytest.skip("this CPU has bf16 units: its bf16 is not emulated")
    import time

    def seconds(optimizer: torch.optim.Optimizer, weight: torch.nn.Parameter) -> float:
        weight.grad = torch.randn_like(weight)
        optimizer.step()
        start = time.perf_counter()
        optimizer.step()
        return time.perf_counter() - start

    w1, w2 = (torch.nn.Parameter(torch.randn(1024, 256)) for _ in range(2))
    ours = seconds(Muon([w1], ns_dtype=torch.float32, lr=0.02), w1)
    theirs = seconds(torch.optim.Muon([w2], lr=0.02), w2)
    assert ours * 5 < theirs, (ours, theirs)


def test_each_optimizer_gets_its_own_peak_times_the_schedule():
    cfg = TrainConfig(optimizer="muon", lr=2e-3, muon_lr=0.05, steps=1000, warmup=100).validate()
    optimizer = make_optimizer(tiny_model(), cfg, torch.device("cpu"))
    set_lr(optimizer, 49, cfg)  # half way through the warmup
    muon, adamw = optimizer.optimizers
    assert [g["lr"] for g in muon.param_groups] == pytest.approx([0.025])
    assert [g["lr"] for g in adamw.param_groups] == pytest.approx([1e-3, 1e-3])


@pytest.mark.parametrize("optimizer", ["muon", "adamw"])
def test_compile_optimizer_holds_each_rate_as_a_tensor_and_steps_as_floats_do(optimizer):
    """With ``compile_optimizer`` every group's learning rate is one 0-dim tensor that the schedule sets in place
    (a compiled step reads it, never recompiles for it), and the updates are the float rates' (fused AdamW's
    and the multiplied Muon update's arithmetic: within 1e-6)."""
    options = {"optimizer": optimizer, "lr": 2e-3, "muon_lr": 0.05, "steps": 1000, "warmup": 100,
               "muon_weight_decay": 0.1}
    floats = TrainConfig(**options).validate()
    tensors = TrainConfig(**options, compile=True, compile_optimizer=True).validate()
    models = {name: tiny_model() for name in ("floats", "tensors")}
    models["tensors"].load_state_dict(models["floats"].state_dict())
    opts = {"floats": make_optimizer(models["floats"], floats, torch.device("cpu")),
            "tensors": make_optimizer(models["tensors"], tensors, torch.device("cpu"))}
    held = [g["lr"] for g in opts["tensors"].param_groups]
    assert all(isinstance(lr, torch.Tensor) and lr.dim() == 0 for lr in held)
    assert not any(isinstance(g["lr"], torch.Tensor) for g in opts["floats"].param_groups)
    for step in range(3):
        for name, cfg in (("floats", floats), ("tensors", tensors)):
            set_lr(opts[name], 49 + step, cfg)
            for i, p in enumerate(models[name].parameters()):
                p.grad = torch.randn(p.shape, generator=torch.Generator().manual_seed(100 * step + i))
            opts[name].step()
    assert all(g["lr"] is lr for g, lr in zip(opts["tensors"].param_groups, held, strict=True))  # set in place
    assert [g["lr"].item() for g in opts["tensors"].param_groups] == pytest.approx(
        [g["lr"] for g in opts["floats"].param_groups])
    for a, b in zip(models["floats"].parameters(), models["tensors"].parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_the_compiled_step_compiles_once_for_the_whole_schedule():
    """``compile_step``: Muon + AdamW through torch.compile take the eager step's updates, and after the first two
    steps (the optimizers' state is created on the first) a changing learning rate compiles nothing more."""
    from torch._dynamo.utils import counters

    cfg = TrainConfig(optimizer="muon", compile=True, compile_optimizer=True, steps=100, warmup=10).validate()
    models = {"eager": tiny_model(), "compiled": tiny_model()}
    models["compiled"].load_state_dict(models["eager"].state_dict())
    opts = {name: make_optimizer(model, cfg, torch.device("cpu")) for name, model in models.items()}
    for opt in opts.values():  # fp32 Newton-Schulz: bf16's rounding would differ where the compiler fuses
        opt.optimizers[0].ns_dtype = torch.float32
    compile_step(opts["compiled"], "default")
    start = [p.detach().clone() for p in models["eager"].parameters()]
    graphs = []
    for step in range(6):
        for name, model in models.items():
            set_lr(opts[name], step, cfg)
            for i, p in enumerate(model.parameters()):
                p.grad = torch.randn(p.shape, generator=torch.Generator().manual_seed(100 * step + i))
            opts[name].step()
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[2:] == [graphs[1]] * 4, graphs  # steps 2-5 (warmup: a new rate each) reuse the graphs
    for a, b, w0 in zip(models["eager"].parameters(), models["compiled"].parameters(), start, strict=True):
        assert (b - a).norm() / (a - w0).norm() < 1e-5  # measured: 9e-7 at most


def test_resuming_keeps_the_compiled_steps_rate_tensors_at_the_saved_rates():
    """A checkpoint (saved with float or tensor rates) loads into an optimizer whose rates are tensors: the same
    tensor objects stay in the groups, holding the saved rates."""
    cfg = TrainConfig(optimizer="muon", lr=2e-3, muon_lr=0.05, steps=1000, warmup=100).validate()
    saved = make_optimizer(tiny_model(), cfg, torch.device("cpu"))
    set_lr(saved, 49, cfg)
    compiled = TrainConfig(**{**cfg.to_dict(), "compile": True, "compile_optimizer": True}).validate()
    optimizer = make_optimizer(tiny_model(), compiled, torch.device("cpu"))
    held = [g["lr"] for g in optimizer.param_groups]
    load_optimizer_state(optimizer, saved.state_dict())
    assert all(g["lr"] is lr for g, lr in zip(optimizer.param_groups, held, strict=True))
    assert [lr.item() for lr in held] == pytest.approx([0.025, 1e-3, 1e-3])


def newton_schulz_reference(g: torch.Tensor, steps: int = 5) -> torch.Tensor:
    """Muon's orthogonalisation, from its definition: scale G to spectral norm <= 1 (by its Frobenius norm),
    then X <- aX + (bA + cA^2)X with A = XX^T, on the wide side, with the quintic's (a, b, c)."""
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g.double()
    wide = x.T if g.size(0) > g.size(1) else x
    wide = wide / wide.norm()
    for _ in range(steps):
        gram = wide @ wide.T
        wide = a * wide + (b * gram + c * gram @ gram) @ wide
    return (wide.T if g.size(0) > g.size(1) else wide).float()


@pytest.mark.parametrize("make, tolerance", [
    # torch's own, which orthogonalises in bfloat16: within 3% (1.2% measured)
    (lambda params, **kw: torch.optim.Muon(params, **kw), 0.03),
    # ours in fp32 (CPUs without bf16 units): torch's algorithm, to fp32's precision
    (lambda params, **kw: Muon(params, ns_dtype=torch.float32, **kw), 1e-5),
], ids=["torch-bf16", "fp32"])
@pytest.mark.parametrize("weight_decay", [0.0, 0.5])
def test_muon_update_matches_a_reference_over_three_steps(make, tolerance, weight_decay):
    """Three steps with known gradients: the weight shrunk by 1 - lr x weight_decay (decoupled), then
    momentum (an average, Nesterov) orthogonalised, scaled by sqrt(max(1, rows/cols)) and the learning rate."""
    lr, momentum = 0.02, 0.95
    weight = torch.nn.Parameter(torch.randn(48, 16, generator=torch.Generator().manual_seed(1)))
    start = weight.detach().clone()
    optimizer = make([weight], lr=lr, momentum=momentum, weight_decay=weight_decay)
    grads = [torch.randn(48, 16, generator=torch.Generator().manual_seed(s)) for s in (2, 3, 4)]
    expected, buffer = start.clone(), torch.zeros_like(start)
    for grad in grads:
        weight.grad = grad.clone()
        optimizer.step()
        buffer = momentum * buffer + (1 - momentum) * grad
        nesterov = (1 - momentum) * grad + momentum * buffer
        expected = expected * (1 - lr * weight_decay) - lr * math.sqrt(48 / 16) * newton_schulz_reference(nesterov)
    moved, expected_move = weight.detach() - start, expected - start
    # no Nesterov would be 20% off, no sqrt(rows/cols) 73%
    assert (moved - expected_move).norm() / expected_move.norm() < tolerance
    assert expected_move.abs().max() > 0.02  # it did move


def test_the_reference_orthogonalises():
    """What Newton-Schulz is for: singular values pushed into roughly [0.7, 1.2], directions kept."""
    g = torch.randn(32, 64, generator=torch.Generator().manual_seed(4)) * 7
    singular = torch.linalg.svdvals(newton_schulz_reference(g))
    assert singular.min() > 0.6 and singular.max() < 1.25
    assert torch.linalg.svdvals(g).max() > 50


def test_hidden_matrices_are_the_blocks_2d_weights():
    model = tiny_model()
    assert all(p.dim() == 2 for p in hidden_matrices(model))
    assert len(list(hidden_matrices(model))) == 16


def test_a_muon_run_with_wsd_learns(tmp_path, tiny_config, cache_dir):
    rec = Recorder()
    result = train(tiny_config(steps=30, eval_every=15, optimizer="muon", lr_schedule="wsd", sample_tokens=0),
                   tmp_path, callbacks=rec, cache_dir=cache_dir)
    vals = [m.val_loss for m in rec.evals]
    assert result.steps_done == 30 and vals[-1] < vals[0] - 0.5  # 6.25 -> 5.35 measured
    lrs = {m.step: m.lr for m in rec.steps}
    assert lrs[15] == pytest.approx(1e-3)  # stable (warmup 3, decay over the last 6 steps)
    # logged: the rate of the step just taken (step 29: 5/6 of the way down to the floor, 1e-4)
    assert lrs[30] == pytest.approx(2.5e-4)


@pytest.mark.parametrize("ns_steps", [5, 3])
@pytest.mark.parametrize("ns_dtype, tolerance", [(torch.float32, 1e-6), (torch.bfloat16, 1e-2)], ids=["fp32", "bf16"])
def test_the_batched_step_is_the_per_matrix_update(ns_dtype, tolerance, ns_steps):
    """Matrices of one shape orthogonalised as a stack give each the update it gets alone (the per-matrix
    reference: :func:`newton_schulz` on that matrix), for wide, tall and square shapes together; in bf16 the
    per-matrix reference is torch's own Muon."""
    shapes = [(48, 16), (48, 16), (16, 48), (32, 32), (48, 16), (32, 32)]
    make = [torch.Generator().manual_seed(i) for i in range(len(shapes))]
    weights = [torch.nn.Parameter(torch.randn(*s, generator=g)) for s, g in zip(shapes, make, strict=True)]
    alone = [torch.nn.Parameter(w.detach().clone()) for w in weights]
    options = {"lr": 0.02, "momentum": 0.95, "weight_decay": 0.1, "ns_steps": ns_steps}
    batched = Muon(weights, ns_dtype=ns_dtype, **options)
    if ns_dtype == torch.bfloat16:
        singles = [torch.optim.Muon([w], **options) for w in alone]
    else:
        singles = [Muon([w], ns_dtype=ns_dtype, **options) for w in alone]
    start = [w.detach().clone() for w in weights]
    for step in range(3):
        for i, (w, v) in enumerate(zip(weights, alone, strict=True)):
            w.grad = torch.randn(w.shape, generator=torch.Generator().manual_seed(100 * step + i))
            v.grad = w.grad.clone()
        batched.step()
        for single in singles:
            single.step()
    for w, v, w0 in zip(weights, alone, start, strict=True):
        moved, expected = w.detach() - w0, v.detach() - w0
        assert (moved - expected).norm() / expected.norm() < tolerance
    assert newton_schulz(torch.randn(3, 48, 16), (3.4445, -4.7750, 2.0315), 5, 1e-7, torch.float32).shape == (3, 48, 16)
