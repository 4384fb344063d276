import math

import pytest
import torch

from tinygpt.config import GPTConfig
from tinygpt.info import untrained_loss
from tinygpt.model import GPT, KVCache, Linear, apply_rope, rope_tables
from tinygpt.presets import ARCHS, PRESETS, list_presets, model_config, parameter_count

ARCH_NAMES = list(ARCHS)
SPEEDRUN = {"mlp": "relu2", "qk_norm": True, "untied_head": True}  # the speedruns' switches, all at once


def small_config(arch: str, **kw) -> GPTConfig:
    return model_config("tiny", arch, vocab_size=300, context=32, dropout=0.0, **kw)


def test_holmes_is_the_series_model_exactly():
    parts = GPT(model_config("holmes")).param_breakdown()
    assert parts == {
        "embedding": 1_048_576,
        "position_embedding": 0,
        "block": 788_736,
        "block_attention": 262_144,
        "block_mlp": 525_568,
        "block_norms": 1_024,
        "blocks": 6 * 788_736,
        "final_norm": 512,
        "head": 0,
        "total": 5_781_504,
    }
    cfg = model_config("holmes")
    assert (cfg.pos, cfg.norm, cfg.mlp, cfg.dropout, cfg.context) == ("rope", "layernorm", "gelu", 0.1, 256)


@pytest.mark.parametrize("arch", ["classic", "modern"])
def test_cpu_preset_sizes(arch):
    assert 400_000 <= parameter_count("tiny", arch) <= 650_000
    assert 2_400_000 <= parameter_count("student", arch) <= 2_800_000
    assert parameter_count("student", arch) < parameter_count("small", arch) < parameter_count("holmes", arch)


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("switches", [{}, {"bias": False, "attn_bias": True}, {"norm": "rmsnorm", "bias": True},
                                      {"mlp": "swiglu", "pos": "learned", "bias": True},
                                      SPEEDRUN])
def test_counted_parameters_are_the_built_models(preset, arch, switches):
    config = model_config(preset, arch, **switches)
    with torch.device("meta"):
        built = GPT(config)
    assert config.num_params == built.num_params()


def test_presets_listed_with_counts():
    listed = {p["name"]: p for p in list_presets()}
    assert set(listed) == set(PRESETS)
    assert listed["holmes"]["params"]["series"] == 5_781_504
    assert listed["holmes"]["default_arch"] == "series"


def test_arch_switches():
    classic, modern = model_config("tiny", "classic"), model_config("tiny", "modern")
    assert (classic.pos, classic.norm, classic.mlp, classic.bias) == ("learned", "layernorm", "gelu", True)
    assert (modern.pos, modern.norm, modern.mlp, modern.bias) == ("rope", "rmsnorm", "swiglu", False)
    m = GPT(modern)
    assert all(n.endswith("weight") for n, _ in m.named_parameters())  # no biases anywhere


def test_bad_configs_name_the_problem():
    with pytest.raises(ValueError, match="divisible by n_heads"):
        GPTConfig(d_model=100, n_heads=3)
    with pytest.raises(ValueError, match="norm must be one of"):
        GPTConfig(norm="batchnorm")
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        model_config("huge")


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_untrained_loss_is_near_ln_vocab(arch):
    torch.manual_seed(0)
    model = GPT(model_config("tiny", arch))
    assert abs(untrained_loss(model) - math.log(4096)) < 0.1


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_forward_shapes_and_tied_embedding(arch):
    model = GPT(small_config(arch))
    x = torch.randint(300, (2, 16))
    logits, loss = model(x, x)
    assert logits.shape == (2, 16, 300) and loss.ndim == 0
    assert model.head.weight is model.tok_emb.weight


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_attention_is_causal(arch):
    torch.manual_seed(0)
    model = GPT(small_config(arch)).eval()
    x = torch.randint(300, (1, 20))
    y = x.clone()
    y[0, 12:] = (y[0, 12:] + 1) % 300
    with torch.no_grad():
        a, _ = model(x)
        b, _ = model(y)
    torch.testing.assert_close(a[0, :12], b[0, :12])
    assert not torch.allclose(a[0, 12:], b[0, 12:])


@pytest.mark.parametrize("arch, switches", [(arch, {}) for arch in ARCH_NAMES] + [("modern", SPEEDRUN)])
def test_kv_cache_gives_the_same_logits_as_full_forward(arch, switches):
    torch.manual_seed(0)
    cfg = small_config(arch, **switches)
    model = GPT(cfg).eval()
    x = torch.randint(300, (1, 24))
    with torch.no_grad():
        full, _ = model(x)
        cache = KVCache(cfg, 1, torch.device("cpu"), torch.float32)
        first, _ = model(x[:, :10], cache=cache, start_pos=0)
        steps = [model(x[:, i : i + 1], cache=cache, start_pos=i)[0] for i in range(10, 24)]
    torch.testing.assert_close(torch.cat([first, *steps], dim=1), full, atol=1e-5, rtol=1e-4)


def test_init_scales():
    torch.manual_seed(0)
    model = GPT(model_config("holmes"))
    assert model.tok_emb.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert model.blocks[0].attn.qkv.weight.std().item() == pytest.approx(0.02, rel=0.05)
    expected = 0.02 / math.sqrt(2 * 6)
    assert model.blocks[0].attn.proj.weight.std().item() == pytest.approx(expected, rel=0.05)
    assert model.blocks[0].mlp.down.weight.std().item() == pytest.approx(expected, rel=0.05)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_gradient_checkpointing_gives_the_same_gradients(arch):
    torch.manual_seed(0)
    model = GPT(small_config(arch))
    x = torch.randint(300, (2, 16))
    _, loss = model(x, x)
    loss.backward()
    plain = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model.gradient_checkpointing = True
    _, loss = model(x, x)
    loss.backward()
    for g, p in zip(plain, model.parameters(), strict=True):
        torch.testing.assert_close(p.grad, g)


def test_sequence_longer_than_context_is_rejected():
    model = GPT(small_config("series"))
    with pytest.raises(ValueError, match="exceeds the context of 32"):
        model(torch.zeros(1, 33, dtype=torch.long))


def test_rope_keeps_lengths_and_depends_only_on_relative_position():
    cos, sin = rope_tables(8, 32, 10000.0)
    q, k = torch.randn(8), torch.randn(8)
    at = lambda v, pos: apply_rope(v.view(1, 8), cos[pos : pos + 1], sin[pos : pos + 1])[0]  # noqa: E731
    assert torch.allclose(at(q, 5).norm(), q.norm())
    assert torch.allclose(at(q, 0), q)  # position 0 does not turn
    assert torch.allclose(at(q, 7) @ at(k, 3), at(q, 24) @ at(k, 20), atol=1e-5)  # same offset 4
    assert not torch.allclose(at(q, 7) @ at(k, 3), at(q, 7) @ at(k, 6), atol=1e-3)


@pytest.mark.parametrize("bias", [True, False])
def test_one_row_inference_path_of_linear_matches_f_linear(bias):
    layer = Linear(16, 24, bias=bias)
    x = torch.randn(3, 1, 16)
    with torch.no_grad():
        fast = layer(x)
        layer.weight.mul_(2.0)  # an in-place update must refresh the cached transpose
        refreshed = layer(x)
    expected = torch.nn.functional.linear(x, layer.weight, layer.bias)
    assert torch.allclose(refreshed, expected, atol=1e-6)
    assert not torch.allclose(fast, refreshed)


def test_relu2_mlp_is_the_square_of_relu_through_four_times_the_width():
    torch.manual_seed(0)
    config = small_config("series", mlp="relu2")
    mlp = GPT(config).blocks[0].mlp
    x = torch.randn(2, 5, config.d_model)  # (B, T, C)
    up = x @ mlp.up.weight.T + mlp.up.bias  # (B, T, 4C), written from the definition
    expected = torch.where(up > 0, up * up, torch.zeros_like(up)) @ mlp.down.weight.T + mlp.down.bias
    assert mlp.up.weight.shape == (4 * config.d_model, config.d_model)
    torch.testing.assert_close(mlp(x), expected)


def test_qk_norm_attends_with_unit_rms_queries_and_keys_before_rope():
    torch.manual_seed(0)
    config = small_config("series", qk_norm=True)
    model = GPT(config).eval()
    attn, (B, T, C), h = model.blocks[0].attn, (2, 7, config.d_model), config.n_heads
    x = torch.randn(B, T, C)
    q, k, v = (x @ attn.qkv.weight.T).split(C, dim=-1)  # (B, T, C) each
    heads = [t.view(B, T, h, C // h).transpose(1, 2) for t in (q, k, v)]  # (B, h, T, hd)
    rms = [t / t.pow(2).mean(-1, keepdim=True).add(torch.finfo(t.dtype).eps).sqrt() for t in heads[:2]]
    cos, sin = model.rope_cos[:T], model.rope_sin[:T]
    q, k = (apply_rope(t, cos, sin) for t in rms)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(C // h)  # (B, h, T, T)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    y = (scores.softmax(-1) @ heads[2]).transpose(1, 2).reshape(B, T, C) @ attn.proj.weight.T
    torch.manual_seed(0)
    plain = GPT(small_config("series")).blocks[0].attn  # the same weights (qk_norm has none), without it
    with torch.no_grad():
        torch.testing.assert_close(attn(x, (cos, sin)), y, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(plain.qkv.weight, attn.qkv.weight)
        assert not torch.allclose(plain(x, (cos, sin)), y, atol=1e-3)


def test_attn_dropout_zero_leaves_attention_exact_and_the_residual_branches_dropped():
    """attn_dropout 0 with dropout 0.1: in training the attention of a block is the evaluation's exactly (no mask
    on its probabilities), while the block's output still varies (dropout on the residual branches); unset, the
    attention probabilities are dropped too."""
    torch.manual_seed(0)
    x = torch.randn(2, 16, 64)
    kept = GPT(model_config("tiny", "series", vocab_size=300, context=32, dropout=0.1, attn_dropout=0.0)).train()
    dropped = GPT(model_config("tiny", "series", vocab_size=300, context=32, dropout=0.1)).train()
    rope = (kept.rope_cos[:16], kept.rope_sin[:16])
    block = kept.blocks[0]
    with torch.no_grad():
        exact = block.attn.eval()(block.norm1(x), rope)
        torch.testing.assert_close(block.attn.train()(block.norm1(x), rope), exact, rtol=0, atol=0)
        assert not torch.equal(block(x, rope), block(x, rope))  # the residual branches' dropout
        attn = dropped.blocks[0].attn
        assert not torch.equal(attn(x, rope), attn(x, rope))
    assert (kept.config.attention_dropout, dropped.config.attention_dropout) == (0.0, 0.1)
    assert kept.num_params() == dropped.num_params()


def test_an_untied_head_is_its_own_matrix_and_starts_at_exactly_ln_vocab():
    torch.manual_seed(0)
    model = GPT(small_config("modern", untied_head=True))
    x = torch.randint(300, (2, 16))
    _, loss = model(x, x)
    assert model.head.weight is not model.tok_emb.weight and not model.head.weight.any()
    assert loss.item() == pytest.approx(math.log(300), abs=1e-6)
    assert model.param_breakdown()["head"] == 300 * model.config.d_model
    loss.backward()
    assert model.head.weight.grad.abs().sum() > 0 and model.tok_emb.weight.grad.abs().sum() == 0  # zero head: no signal back yet
