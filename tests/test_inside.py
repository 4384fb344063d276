"""Inside a model (tinygpt/inside.py), by known answers: attention patterns are probabilities over the keys up to
each query; the per-token losses are cross-entropy's; the logit lens' last stream is the model's output; the
head scores of hand-built patterns are their definitions; and a model trained here on repeated random tokens
grows an induction head."""

from __future__ import annotations

import re

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


# -- over training: the scores at every evaluation, kept checkpoints ------------------------------------------
class Recorder:
    """Callbacks keeping what the trainer reports of the heads and the checkpoints."""

    def __init__(self) -> None:
        from tinygpt.records import Callbacks

        self.scores: dict[int, dict] = {}
        self.checkpoints: list[str] = []
        self.callbacks = type("Kept", (Callbacks,), {
            "on_head_scores": lambda _self, step, scores: self.scores.__setitem__(step, scores),
            "on_checkpoint": lambda _self, path, kind: self.checkpoints.append(kind)})()


def test_training_records_every_heads_scores_at_each_evaluation_and_keeps_checkpoints(tiny_config, cache_dir,
                                                                                     tmp_path):
    from tinygpt.checkpoint import load_model
    from tinygpt.records import HEAD_SCORES, HEAD_SCORES_FILE, read_head_scores
    from tinygpt.train import Trainer

    recorder = Recorder()
    config = tiny_config(steps=20, eval_every=5, keep_every=10, sample_tokens=0)
    Trainer(config, tmp_path, callbacks=recorder.callbacks, cache_dir=cache_dir).run()
    assert sorted(recorder.scores) == [0, 5, 10, 15, 20]
    assert set(recorder.scores[20]) == set(HEAD_SCORES)
    layers, heads = 4, 4  # the tiny preset
    assert [len(r) for r in recorder.scores[20]["induction"]] == [heads] * layers
    assert read_head_scores(tmp_path / HEAD_SCORES_FILE) == recorder.scores
    assert [k for k in recorder.checkpoints if k.startswith("step-")] == ["step-10", "step-20"]
    model, _, _ = load_model(tmp_path / "step-20.pt")  # the model as it was at step 20: its scores again
    again = head_scores(model)
    assert torch.allclose(again["induction"], torch.tensor(recorder.scores[20]["induction"]), atol=1e-6)
    assert torch.load(tmp_path / "step-10.pt", weights_only=True)["optimizer"] is None  # weights only


def test_head_scores_off_records_none(tiny_config, cache_dir, tmp_path):
    from tinygpt.records import HEAD_SCORES_FILE
    from tinygpt.train import Trainer

    recorder = Recorder()
    Trainer(tiny_config(steps=5, eval_every=5, sample_tokens=0, head_scores=False), tmp_path,
            callbacks=recorder.callbacks, cache_dir=cache_dir).run()
    assert recorder.scores == {} and not (tmp_path / HEAD_SCORES_FILE).exists()


def reported_with_scores(client, steps: list[int]) -> int:  # noqa: ANN001
    """A reported run whose trainer sent rows and head scores (a 2 x 2 model) at ``steps``; its id."""
    import os

    created = client.post("/api/runs/reported", json={"report_id": os.urandom(8).hex(), "name": "heads",
                                                      "config": {"preset": "tiny", "steps": max(*steps, 1)}})
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]
    items = []
    for step in steps:
        row = {"step": step, "train_loss": 5.0, "val_loss": 5.0 - step / 100, "lr": 1e-3, "tokens_per_sec": 1.0,
               "elapsed_sec": float(step), "tokens_seen": step * 64, "epochs": 0.0, "peak_mem_mib": 0.0}
        items += [{"kind": "metric", "data": row},
                  {"kind": "head_scores", "data": {"step": step, "scores": {
                      "induction": [[0.05, step / 100], [0.1, 0.2]], "previous_token": [[0.5, 0.5], [0.5, 0.5]]}}}]
    batch = {"items": [{"seq": i + 1, **item} for i, item in enumerate(items)]}
    assert client.post(f"/api/runs/{run_id}/report", json=batch).status_code == 200
    return run_id


def test_reported_head_scores_read_back_by_evaluation_and_in_compare(make_app):
    client = make_app()
    run_id = reported_with_scores(client, [0, 50, 100])
    other = reported_with_scores(client, [0, 50])
    got = client.get(f"/api/runs/{run_id}/head-scores").json()
    assert got == {"steps": [0, 50, 100], "layers": 2, "heads": 2, "val_loss": [5.0, 4.5, 4.0], "scores": {
        "previous_token": [[[0.5, 0.5], [0.5, 0.5]]] * 3,
        "induction": [[[0.05, 0.0], [0.1, 0.2]], [[0.05, 0.5], [0.1, 0.2]], [[0.05, 1.0], [0.1, 0.2]]]}}
    compared = client.get("/api/compare", params={"ids": f"{run_id},{other}"}).json()["runs"]
    assert [(r["induction_score"], r["induction_formed_step"]) for r in compared] == [(1.0, 50), (0.5, 50)]
    row = re.search(r'<tr id="induction-row">.*?</tr>', client.get("/compare", params={"ids": f"{run_id},{other}"}).text)
    assert re.sub(r"<[^>]+>", "", row.group(0).split("</th>", 1)[1]) == "1.000 (step 50)0.500 (step 50)"
    assert client.get("/api/runs/999/head-scores").json() == {"steps": [], "layers": 0, "heads": 0, "scores": {},
                                                               "val_loss": []}
    page = client.get(f"/runs/{run_id}").text
    assert "heads/induction" not in page  # drawn by the Inside view, not listed as the trainer's own series


def test_a_report_of_unknown_or_unbounded_scores_is_refused(make_app):
    client = make_app()
    run_id = reported_with_scores(client, [0])
    for scores, message in [({"attention": [[0.1]]}, "Input should be 'previous_token', 'induction', 'first_token' "
                                                      "or 'entropy'"),
                            ({"induction": [[0.1] * 4097]}, "Value error, induction: at most 4096 heads")]:
        batch = {"items": [{"seq": 3, "kind": "head_scores", "data": {"step": 1, "scores": scores}}]}
        response = client.post(f"/api/runs/{run_id}/report", json=batch)
        assert response.status_code == 422 and message in response.text, response.text


# -- the API's other views: checkpoints, validation passages, two models, the embeddings -----------------------
def test_a_dashboard_runs_checkpoints_and_validation_passages(make_app, trained, slice_path):
    """A run trained by the dashboard's worker stands in as a run folder under the app's runs folder, recorded
    as the worker records it."""
    import shutil

    from app.db import session_scope
    from app.models import Run
    from tinygpt.checkpoint import load_model
    from tinygpt.data import passage, validation_tokens

    folder = trained("series", keep_every=2)
    client = make_app()
    created = client.post("/api/runs", json={"name": "kept", "preset": "tiny", "steps": 4, "vocab_size": 512})
    run_id = created.json()[0]["id"]
    settings = client.app.state.settings
    out = settings.runs_dir / f"run-{run_id}"
    shutil.copytree(folder, out)
    with session_scope(settings) as s:
        run = s.get(Run, run_id)
        run.out_dir, run.checkpoint_path, run.best_step = str(out), str(out / "best.pt"), 4
        s.add(run)
    choices = client.get(f"/api/runs/{run_id}/inside/checkpoints").json()
    model, tokenizer, _ = load_model(out / "best.pt")
    val = validation_tokens(slice_path, tokenizer, model.config.context, None)
    assert choices == {"checkpoints": [{"name": "best", "step": 4}, {"name": "step-2", "step": 2},
                                       {"name": "step-4", "step": 4}, {"name": "last", "step": None}],
                       "passages": len(val) // model.config.context, "context": model.config.context,
                       "layers": model.config.n_layers, "heads": model.config.n_heads}
    got = client.get(f"/api/runs/{run_id}/inside", params={"passage": 3, "checkpoint": "step-2"}).json()
    assert [t["id"] for t in got["tokens"]] == passage(val, model.config.context, 3).tolist()
    early, _, _ = load_model(out / "step-2.pt")
    assert got["mean_loss"] == pytest.approx(look_inside(early, passage(val, model.config.context, 3)).mean_loss,
                                             abs=1e-6)
    diff = client.get(f"/api/runs/{run_id}/inside/diff", params={"passage": 3, "checkpoint": "step-2",
                                                                 "other": run_id, "other_checkpoint": "step-4"}).json()
    later = look_inside(load_model(out / "step-4.pt")[0], passage(val, model.config.context, 3)).token_loss
    assert diff["other_loss"] == pytest.approx(later.tolist(), abs=1e-6)
    assert diff["mean_difference"] == pytest.approx(float(later.mean()) - got["mean_loss"], abs=1e-6)
    assert diff["mean_difference"] < 0  # two more steps of training predict this passage better
    for params, status, field, message in [
        ({"passage": 10**6}, 422, "passage", f"passage 1000000 is not there: the split has passages 0 to "
                                             f"{choices['passages'] - 1}"),
        ({"text": "Holmes", "passage": 1}, 422, "text", "give either text or passage (a window of the run's "
                                                        "validation split)"),
        ({"text": "Holmes said", "checkpoint": "step-3"}, 404, None, f"run {run_id} keeps no checkpoint step-3"),
        ({"text": "Holmes said", "checkpoint": "../best"}, 422, "checkpoint", "checkpoint is best, last or step-N "
                                                                              "(a kept one: GET .../inside/checkpoints)"),
    ]:
        response = client.get(f"/api/runs/{run_id}/inside", params=params)
        detail = response.json()["detail"]
        assert response.status_code == status, response.text
        assert (detail[0]["loc"][-1], detail[0]["msg"]) == (field, message) if field else detail == message


def test_an_imported_run_has_no_validation_passages_and_two_tokenizers_do_not_compare(
        make_app, imported_run, write_checkpoint, tmp_path, small_tokenizer):
    from tinygpt.tokenizer import Tokenizer

    client = make_app()
    run_id = imported_run(client, write_checkpoint(tmp_path / "best.pt"))
    other_tokenizer = Tokenizer.train("Holmes and Watson walked to Baker Street. " * 50, 300).to_dict()
    other = imported_run(client, write_checkpoint(tmp_path / "other.pt", tokenizer=other_tokenizer, vocab_size=300))
    assert client.get(f"/api/runs/{run_id}/inside/checkpoints").json()["passages"] == 0
    refused = client.get(f"/api/runs/{run_id}/inside", params={"passage": 0}).json()["detail"][0]
    assert (refused["loc"][-1], refused["msg"]) == ("passage", "this run's corpus is not on this machine: type a "
                                                               "passage instead")
    diff = client.get(f"/api/runs/{run_id}/inside/diff", params={"text": "Holmes said", "other": other}).json()
    assert diff["detail"][0]["msg"] == "the two models have different tokenizers: their per-token losses do not line up"


def test_the_embedding_map_is_the_embeddings_principal_components(make_app, imported_run, write_checkpoint, tmp_path):
    from tinygpt.checkpoint import load_model

    checkpoint = write_checkpoint(tmp_path / "best.pt")
    client = make_app()
    run_id = imported_run(client, checkpoint)
    got = client.get(f"/api/runs/{run_id}/inside/embeddings").json()
    model, tokenizer, _ = load_model(checkpoint)
    weights = model.tok_emb.weight.detach()
    centred = weights - weights.mean(0)
    xy = torch.tensor([got["x"], got["y"]]).T  # (V, 2)
    assert len(got["tokens"]) == tokenizer.vocab_size and got["tokens"][ord("H")] == "H"
    # the components are orthogonal directions of most variance: the points' variance is the top eigenvalues'
    top = torch.linalg.eigvalsh(centred.T @ centred).flip(0)[:2]
    assert (xy**2).sum(0).tolist() == pytest.approx(top.tolist(), rel=1e-3)
    assert got["variance_share"][0] >= got["variance_share"][1] > 0


def test_induction_step_as_a_sweep_objective(make_app):
    from app.db import session_scope
    from app.models import Run
    from app.services.sweeps import NEVER_FORMED_STEP, objective

    client = make_app()
    formed = reported_with_scores(client, [0, 50, 100])  # its best head reaches 0.5 at step 50
    never = reported_with_scores(client, [0])  # best head 0.2
    with session_scope(client.app.state.settings) as s:
        assert objective(s, s.get(Run, formed), "induction_step") == 50.0
        assert objective(s, s.get(Run, never), "induction_step") == pytest.approx(NEVER_FORMED_STEP + 0.8)
        unscored = Run(name="none", config={})
        s.add(unscored)
        s.flush()
        assert objective(s, unscored, "induction_step") is None
    body = {"method": "grid", "metric": {"name": "induction_step"}, "parameters": {"lr": {"values": [1e-3]}},
            "base": {"preset": "tiny", "device": "cpu", "steps": 2, "head_scores": False}}
    refused = client.post("/api/sweeps", json=body)
    assert (refused.status_code, refused.json()["detail"][0]["msg"]) == (
        422, "metric induction_step needs the heads' scores recorded: leave head_scores on, unswept")
    del body["base"]["head_scores"]
    assert client.post("/api/sweeps", json=body).status_code == 201
