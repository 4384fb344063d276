"""tinygpt/dropout.py: the CPU's cheaper dropout masks, against their definition and against PyTorch's own."""

import math

import pytest
import torch
import torch.nn.functional as F

from tinygpt.config import GPTConfig
from tinygpt.dropout import Dropout, causal_attention, dropout, keep_mask
from tinygpt.model import GPT
from tinygpt.train import train

from .test_train import Recorder


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_keep_mask_drops_p_of_the_elements_and_scales_the_rest(p, dtype):
    torch.manual_seed(0)
    n = 400_000
    mask = keep_mask(torch.empty(n, dtype=dtype), p)
    assert mask.dtype == dtype and mask.shape == (n,)
    dropped = (mask == 0).float().mean().item()
    assert abs(dropped - p) < 5 * math.sqrt(p * (1 - p) / n)  # five standard errors of a binomial share
    kept = mask[mask != 0]
    assert torch.all(kept == torch.tensor(1 / (1 - p), dtype=dtype))


def test_keep_mask_draws_from_the_seeded_generator():
    x = torch.empty(3, 5, 7)
    torch.manual_seed(4)
    first = keep_mask(x, 0.3)
    torch.manual_seed(4)
    assert torch.equal(keep_mask(x, 0.3), first)
    assert not torch.equal(keep_mask(x, 0.3), first)  # the generator moved on
    assert first.shape == (3, 5, 7)


def test_keep_mask_uses_sixteen_bits_an_element_from_one_generator_call_per_four():
    """The definition, written out: four 16-bit numbers from each random 64-bit word, little end first."""
    torch.manual_seed(11)
    mask = keep_mask(torch.empty(10), 0.25)
    torch.manual_seed(11)
    words = torch.empty(3, dtype=torch.int64).random_(-(2**63), None).tolist()
    numbers = []
    for word in words:
        unsigned = word % 2**64
        for shift in (0, 16, 32, 48):
            value = (unsigned >> shift) & 0xFFFF
            numbers.append(value - 2**16 if value >= 2**15 else value)  # as int16
    expected = [0.0 if number < 0.25 * 65536 - 32768 else 1 / 0.75 for number in numbers[:10]]
    assert mask.tolist() == pytest.approx(expected)


def test_dropout_gradient_is_the_mask():
    x = torch.randn(6, 9, requires_grad=True)
    torch.manual_seed(2)
    y = dropout(x, 0.4, training=True)
    torch.manual_seed(2)
    mask = keep_mask(x, 0.4)
    assert torch.equal(y, x.detach() * mask)
    y.sum().backward()
    assert torch.equal(x.grad, mask)


def test_dropout_off_when_evaluating_or_p_is_zero():
    x = torch.randn(4, 4)
    assert dropout(x, 0.3, training=False) is x
    assert dropout(x, 0.0, training=True) is x
    module = Dropout(0.3).eval()
    assert module(x) is x
    assert module.train()(x).eq(0).any()


def test_dropout_leaves_other_devices_and_compiled_graphs_to_pytorch(monkeypatch):
    calls = []
    monkeypatch.setattr(F, "dropout", lambda x, p, training: calls.append((p, training)) or x)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    dropout(torch.ones(3), 0.2, training=True)
    assert calls == [(0.2, True)]


def test_causal_attention_with_dropout_matches_its_definition():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 3, 6, 4).unbind(0)  # (B=2, heads=3, T=6, head_dim=4) each
    torch.manual_seed(5)
    got = causal_attention(q, k, v, 0.2)
    torch.manual_seed(5)
    probs_mask = keep_mask(torch.empty(2, 3, 6, 6), 0.2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(4)
    scores = scores + torch.full((6, 6), float("-inf")).triu(1)  # no query sees a later key
    expected = (scores.softmax(-1) * probs_mask) @ v
    assert torch.allclose(got, expected, atol=1e-6)


def test_causal_attention_without_dropout_is_pytorchs():
    q, k, v = torch.randn(3, 2, 2, 5, 8).unbind(0)
    assert torch.equal(causal_attention(q, k, v, 0.0), F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_model_trains_through_the_cheap_masks_and_evaluates_without_them():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=64, d_model=32, n_heads=2, n_layers=2, context=16, dropout=0.2))
    idx = torch.randint(0, 64, (2, 16))
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(idx)[0], model(idx)[0])  # no dropout when evaluating
    model.train()
    torch.manual_seed(1)
    first = model(idx)[0]
    torch.manual_seed(1)
    assert torch.equal(model(idx)[0], first)  # the seed decides the masks
    assert not torch.equal(model(idx)[0], first)


def test_late_dropout_trains_its_first_steps_as_a_run_without_dropout(tmp_path, tiny_config, cache_dir):
    """``dropout_start`` 0.5 of 8 steps: steps 1-4 lose exactly what a run without dropout loses (the same seed,
    so the same batches and weights), step 5 on differ (the masks start); dropout from the first step differs
    at once."""
    def losses(name: str, **options: object) -> list[float]:
        rec = Recorder()
        train(tiny_config(steps=8, eval_every=8, log_every=1, sample_tokens=0, **options), tmp_path / name,
              callbacks=rec, cache_dir=cache_dir)
        return [m.train_loss for m in rec.steps if m.step > 0]

    late, never, always = (losses("late", dropout=0.1, dropout_start=0.5), losses("never", dropout=0.0),
                           losses("always", dropout=0.1))
    assert len(late) == 8
    assert late[:4] == never[:4] and late[4] != never[4]
    assert always[0] != never[0]


def test_causal_attention_in_bf16_on_the_cpu_is_written_out_and_is_the_kernels_attention(monkeypatch):
    """In bf16 the CPU's fused kernel is passed over (docs/SPEEDRUN.md section 20); the written-out form gives its
    output and gradients to bf16's resolution."""
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 4, 32, 16).unbind(0)  # (B=2, heads=4, T=32, head_dim=16) each
    inputs = [t.bfloat16().requires_grad_() for t in (q, k, v)]
    reference = [t.clone().requires_grad_() for t in (q, k, v)]
    expected = F.scaled_dot_product_attention(*reference, is_causal=True)
    expected.square().sum().backward()
    kernel = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **kw: pytest.fail("the fused kernel was called"))
    got = causal_attention(*inputs, 0.0)
    got.square().sum().backward()
    assert got.dtype == torch.bfloat16
    assert (got.float() - expected).abs().max().item() < 2e-2  # measured 0.009
    for mine, theirs in zip(inputs, reference, strict=True):
        assert (mine.grad.float() - theirs.grad).abs().max().item() < 0.03 * theirs.grad.abs().max().item()  # measured 0.004-0.010
    monkeypatch.setattr(F, "scaled_dot_product_attention", kernel)
    assert torch.equal(causal_attention(q, k, v, 0.0), kernel(q, k, v, is_causal=True))  # fp32 keeps the kernel
