"""Inside a model (tinygpt/inside.py), by known answers: attention patterns are probabilities over the keys up to
each query; the per-token losses are cross-entropy's; the logit lens' last stream is the model's output; the
head scores of hand-built patterns are their definitions; and a model trained here on repeated random tokens
grows an induction head."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tinygpt.inside import (
    entropy_score,
    first_token_score,
    head_scores,
    induction_probe,
    induction_score,
    look_inside,
    previous_token_score,
)
from tinygpt.model import GPT
from tinygpt.presets import model_config

VOCAB, CONTEXT = 96, 40


@pytest.fixture(params=["series", "classic", "modern", "qk_norm"])
def model(request) -> GPT:
    torch.manual_seed(3)
    arch, extra = (request.param, {}) if request.param != "qk_norm" else ("series", {"qk_norm": True})
    return GPT(model_config("tiny", arch, vocab_size=VOCAB, context=CONTEXT, **extra)).eval()


def test_attention_rows_are_probabilities_over_the_keys_up_to_each_query(model):
    seen = look_inside(model, torch.randint(0, VOCAB, (CONTEXT,)))
    assert tuple(seen.attention.shape) == (model.config.n_layers, model.config.n_heads, CONTEXT, CONTEXT)
    assert torch.allclose(seen.attention.sum(-1), torch.ones(model.config.n_layers, model.config.n_heads, CONTEXT))
    assert float(seen.attention.triu(1).abs().max()) == 0.0
    assert float(seen.attention[:, :, 0, 0].min()) == pytest.approx(1.0)  # the first token sees only itself


def test_the_token_losses_are_cross_entropy_and_the_lens_ends_at_the_output(model):
    tokens = torch.randint(0, VOCAB, (CONTEXT,))
    seen = look_inside(model, tokens)
    with torch.no_grad():
        logits, loss = model(tokens.view(1, -1)[:, :-1], tokens.view(1, -1)[:, 1:])
    assert seen.mean_loss == pytest.approx(float(loss), abs=1e-6)
    assert torch.allclose(seen.token_loss, F.cross_entropy(logits[0], tokens[1:], reduction="none"), atol=1e-6)
    assert torch.allclose(seen.lens_logits_last, seen.logits, atol=1e-5)
    assert torch.equal(seen.lens_top[-1], seen.logits.argmax(-1))
    assert seen.lens_top.shape == (model.config.n_layers + 1, CONTEXT)
    probs = seen.logits.softmax(-1)
    assert torch.allclose(seen.lens_next_prob[-1], probs[:-1].gather(-1, tokens[1:, None])[:, 0], atol=1e-6)
    assert torch.equal(seen.top_ids[:, 0], seen.logits.argmax(-1))
    assert torch.allclose(seen.top_probs.sum(-1) <= 1 + 1e-6, torch.ones(CONTEXT, dtype=torch.bool))


def test_a_passage_longer_than_the_context_is_refused(model):
    with pytest.raises(ValueError, match=f"a passage is 2 to {CONTEXT} tokens"):
        look_inside(model, torch.zeros(CONTEXT + 1, dtype=torch.long))


def pattern(rows: dict[int, int], size: int) -> torch.Tensor:
    """A hand-built attention pattern: each query row puts all its weight on one key."""
    a = torch.zeros(size, size)
    for query, key in rows.items():
        a[query, key] = 1.0
    return a


def test_head_scores_of_hand_built_patterns_are_their_definitions():
    n = 5
    previous = pattern({0: 0, **{t: t - 1 for t in range(1, 2 * n)}}, 2 * n)
    induction = pattern({t: (t - n + 1 if t >= n else 0) for t in range(2 * n)}, 2 * n)
    first = pattern({t: 0 for t in range(2 * n)}, 2 * n)
    even = torch.tril(torch.ones(2 * n, 2 * n)) / torch.arange(1, 2 * n + 1)[:, None]  # uniform over the past
    # position 1's only earlier key is the first token: it is the previous one too (1 of the 2n-1 positions scored)
    assert [previous_token_score(a).item() for a in (previous, induction, first)] == pytest.approx(
        [1.0, 1 / (2 * n - 1), 1 / (2 * n - 1)])
    assert [induction_score(a, n).item() for a in (previous, induction, first)] == [0.0, 1.0, 0.0]
    assert first_token_score(first).item() == 1.0
    assert entropy_score(first).item() == 0.0
    assert entropy_score(even).item() == pytest.approx(
        sum(torch.log(torch.tensor(float(t))).item() for t in range(1, 2 * n + 1)) / (2 * n), abs=1e-6)


def test_the_probe_is_random_tokens_repeated_and_the_same_every_time():
    probe = induction_probe(VOCAB, 8)
    assert probe.shape == (4, 16) and torch.equal(probe[:, :8], probe[:, 8:])
    assert torch.equal(probe, induction_probe(VOCAB, 8))


def test_a_model_trained_on_repeated_tokens_grows_an_induction_head():
    """Measured: the best head's induction score 0.056 at step 0, 0.999 by step 100 (2 layers, 64 ids); the test
    asks for a rise of 0.5."""
    torch.manual_seed(0)
    model = GPT(model_config("tiny", vocab_size=64, context=32, n_layers=2))
    before = float(head_scores(model, half=12)["induction"].max())
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(5)
    for _ in range(100):
        half = torch.randint(0, 64, (32, 12), generator=generator)
        x = torch.cat([half, half], dim=1)  # (32, 24)
        _, loss = model(x[:, :-1], x[:, 1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = head_scores(model, half=12)
    assert float(after["induction"].max()) > before + 0.5
    assert after["induction"].shape == (2, 4) and model.training  # the scores leave the model as they found it


def test_tinygpt_inspect_prints_the_passage_and_every_heads_scores(write_checkpoint, tmp_path):
    import subprocess
    import sys

    from tinygpt.checkpoint import load_model
    from tinygpt.inside import head_scores

    from .service_helpers import ROOT

    checkpoint = write_checkpoint(tmp_path / "best.pt")
    model, tokenizer, _ = load_model(checkpoint)
    text = "Holmes said to Watson"
    done = subprocess.run([sys.executable, "-m", "tinygpt", "inspect", str(checkpoint), "--text", text],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    ids = tokenizer.encode(text)
    seen = look_inside(model, torch.tensor(ids))
    assert lines[0].startswith(f"{len(ids)} tokens, mean loss {seen.mean_loss:.4f} nats")
    scores = head_scores(model, vocab_size=tokenizer.vocab_size)
    rows = [line.split() for line in lines[3:]]
    assert len(rows) == model.config.n_layers * model.config.n_heads
    assert rows[-1] == [str(model.config.n_layers - 1), str(model.config.n_heads - 1),
                        *(f"{float(scores[name][-1, -1]):.4f}" for name in scores)]
    refused = subprocess.run([sys.executable, "-m", "tinygpt", "inspect", str(checkpoint), "--text", "x" * 2000],
                             capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert refused.returncode == 1
    assert refused.stderr.strip().startswith("tinygpt inspect: --text is ")


# -- the API: GET /api/runs/{id}/inside ---------------------------------------------------------------------
def test_the_api_answers_the_librarys_numbers(make_app, imported_run, write_checkpoint, tmp_path):
    import base64

    from tinygpt.checkpoint import load_model

    checkpoint = write_checkpoint(tmp_path / "best.pt")
    client = make_app()
    run_id = imported_run(client, checkpoint)
    text = "Holmes said to Watson"
    response = client.get(f"/api/runs/{run_id}/inside", params={"text": text, "layer": 0, "head": 1})
    assert response.status_code == 200, response.text
    got = response.json()
    model, tokenizer, _ = load_model(checkpoint)
    ids = tokenizer.encode(text)
    seen = look_inside(model, torch.tensor(ids))
    assert [t["id"] for t in got["tokens"]] == ids
    assert "".join(t["text"] for t in got["tokens"]) == text
    assert got["mean_loss"] == pytest.approx(seen.mean_loss, abs=1e-6)
    assert got["token_loss"] == pytest.approx(seen.token_loss.tolist(), abs=1e-6)
    shape = [model.config.n_layers, model.config.n_heads, len(ids), len(ids)]
    assert got["attention_shape"] == shape
    grid = torch.frombuffer(bytearray(base64.b64decode(got["attention_u8"])), dtype=torch.uint8).view(*shape)
    assert torch.equal(grid, (seen.attention * 255).round().to(torch.uint8))
    assert torch.allclose(torch.tensor(got["attention"]), seen.attention[0, 1], atol=1e-6)
    assert got["lens"]["rows"][-1] == f"after block {model.config.n_layers - 1}"
    assert got["lens"]["top"][-1] == [tokenizer.token_bytes(i).decode("utf-8", errors="replace")
                                      for i in seen.logits.argmax(-1).tolist()]
    assert [t["id"] for t in got["top"][0]] == seen.top_ids[0].tolist()
    assert set(got["head_scores"]) == {"previous_token", "induction", "first_token", "entropy"}


@pytest.mark.parametrize("params, field, message", [
    ({"text": "x"}, "text", "text is 1 tokens; a passage is 2 to 16 (the model's context)"),
    ({"text": "Holmes said", "layer": 0}, "head", "layer and head come together (one head's full attention)"),
    ({"text": "Holmes said", "layer": 9, "head": 0}, "layer", "the model has layers 0-0 and heads 0-1"),
])
def test_bad_inside_requests_name_the_field(make_app, imported_run, write_checkpoint, tmp_path, params, field,
                                            message):
    client = make_app()
    run_id = imported_run(client, write_checkpoint(tmp_path / "best.pt"))
    response = client.get(f"/api/runs/{run_id}/inside", params=params)
    assert (response.status_code, response.json()["detail"][0]["loc"][-1], response.json()["detail"][0]["msg"]) == (
        422, field, message)
