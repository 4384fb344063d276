import csv
import json

import pytest
import torch

from tinygpt.checkpoint import load_model, read_checkpoint
from tinygpt.corpus import CorpusError, read_corpus
from tinygpt.data import Splits, get_batch
from tinygpt.model import GPT
from tinygpt.optimization import lr_at, make_optimizer
from tinygpt.presets import model_config
from tinygpt.records import METRIC_COLUMNS, Callbacks, read_metrics_csv
from tinygpt.run_config import TrainConfig
from tinygpt.train import Trainer, train


class Recorder(Callbacks):
    def __init__(self, stop_after: int | None = None):
        self.steps, self.evals, self.samples, self.checkpoints = [], [], [], []
        self.stop_after = stop_after
        self.started = None

    def on_start(self, info):
        self.started = info

    def on_step(self, m):
        self.steps.append(m)

    def on_eval(self, m):
        self.evals.append(m)

    def on_sample(self, s):
        self.samples.append(s)

    def on_checkpoint(self, path, kind):
        self.checkpoints.append((kind, self.steps[-1].step))

    def should_stop(self):
        return self.stop_after is not None and bool(self.steps) and self.steps[-1].step >= self.stop_after


def test_lr_schedule_warmup_then_cosine_to_ten_percent():
    cfg = TrainConfig(steps=1500, lr=1e-3)
    assert cfg.warmup_steps() == 150
    assert lr_at(0, cfg) == pytest.approx(1e-3 / 150)
    assert lr_at(149, cfg) == pytest.approx(1e-3)
    assert lr_at(150, cfg) == pytest.approx(1e-3)
    assert lr_at(1500, cfg) == pytest.approx(1e-4)
    mid = 150 + (1500 - 150) // 2
    assert lr_at(mid, cfg) == pytest.approx(0.55e-3, rel=1e-3)
    assert TrainConfig(steps=5000).warmup_steps() == 200


def test_weight_decay_on_2d_weights_only():
    model = GPT(model_config("tiny", "classic", vocab_size=300, context=16))
    opt = make_optimizer(model, TrainConfig(), torch.device("cpu"))
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() == 2 for p in decay["params"]) and all(p.dim() == 1 for p in no_decay["params"])
    assert opt.defaults["betas"] == (0.9, 0.95)


def test_validation_is_the_last_ten_percent(slice_tokens):
    splits = Splits.from_tokens(slice_tokens, 128)
    n_val = int(len(slice_tokens) * 0.1)
    assert torch.equal(splits.val, slice_tokens[-n_val:].long())
    assert torch.equal(torch.cat([splits.train, splits.val]), slice_tokens.long())


def test_batches_are_windows_with_shifted_targets_and_seeded(splits):
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    x1, y1 = get_batch(splits.train, 4, 16, g1, torch.device("cpu"))
    x2, y2 = get_batch(splits.train, 4, 16, g2, torch.device("cpu"))
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert x1.shape == (4, 16)
    assert torch.equal(x1[:, 1:], y1[:, :-1])


@pytest.mark.parametrize("field, value, message", [
    ("steps", 0, "steps must be in [1, 10000000], got 0"),
    ("batch_size", -1, "batch_size must be in [1, 4096], got -1"),
    ("lr", 5.0, "lr must be in (0, 1], got 5.0"),
    ("device", "gpu", "unknown device 'gpu'; use auto, cpu, cuda, cuda:N, mps or xla"),
    ("precision", "fp8", "precision must be one of auto, fp32, bf16, fp16; got 'fp8'"),
    ("preset", "huge", "preset must be one of holmes, tiny, student, small; got 'huge'"),
    ("dropout", 1.5, "dropout must be in [0, 1), got 1.5"),
])
def test_config_validation_names_the_field(field, value, message):
    with pytest.raises(ValueError) as err:
        TrainConfig(**{field: value}).validate()
    assert str(err.value) == message


def test_corpus_errors(tmp_path):
    with pytest.raises(CorpusError, match="not found"):
        read_corpus(tmp_path / "missing.txt")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\xff\xfe")
    with pytest.raises(CorpusError, match="not UTF-8"):
        read_corpus(bad)
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    with pytest.raises(CorpusError, match="empty"):
        read_corpus(empty)


def test_tiny_run_writes_metrics_checkpoints_and_samples(tmp_path, tiny_config, cache_dir):
    rec = Recorder()
    result = train(tiny_config(), tmp_path, callbacks=rec, cache_dir=cache_dir)
    assert result.steps_done == 40 and not result.stopped
    assert rec.started["params"] == GPT(model_config("tiny", vocab_size=512)).num_params()

    with open(tmp_path / "metrics.csv") as f:
        reader = csv.reader(f)
        assert next(reader) == METRIC_COLUMNS
    rows = read_metrics_csv(tmp_path / "metrics.csv")
    assert [r.step for r in rows] == [0, 5, 10, 15, 20, 25, 30, 35, 40]
    assert [r.step for r in rows if r.val_loss is not None] == [0, 20, 40]
    assert [m.step for m in rec.evals] == [0, 20, 40]
    assert rows[-1].val_loss < rows[0].val_loss - 0.3  # it learns
    assert rows[-1].tokens_seen == 40 * 8 * 128
    assert rows[-1].epochs == pytest.approx(rows[-1].tokens_seen / result.info["train_tokens"])
    assert all(r.tokens_per_sec > 0 for r in rows[1:]) and rows[-1].elapsed_sec > 0
    assert all(r.peak_mem_mib > 0 for r in rows)

    assert [s.step for s in rec.samples] == [0, 20, 40]
    assert all(s.text.startswith("Holmes") for s in rec.samples)
    best = [step for kind, step in rec.checkpoints if kind == "best"]
    assert best == [20, 40]  # val improved at both evaluations after step 0
    assert result.best_step == 40 and result.best_val_loss == pytest.approx(rows[-1].val_loss)

    config = json.loads((tmp_path / "config.json").read_text())
    assert config["train"]["steps"] == 40 and config["model"]["vocab_size"] == 512
    assert config["resolved"] == {"device": "cpu", "precision": "fp32", "params": rec.started["params"],
                                  "target_val_loss": None,  # the slice is no known corpus
                                  "val_bytes_per_token": pytest.approx(rec.started["val_bytes_per_token"])}

    model, tokenizer, state = load_model(tmp_path / "best.pt")
    assert state["step"] == 40 and tokenizer.vocab_size <= 512
    assert not any(k.startswith("_orig_mod") for k in state["model"])


def test_best_checkpoint_only_when_validation_improves(tmp_path, tiny_config, cache_dir):
    # A learning rate this high makes validation worse after the first evaluation.
    rec = Recorder()
    result = train(tiny_config(lr=1.0, warmup=0, steps=60), tmp_path, callbacks=rec, cache_dir=cache_dir)
    vals = [m.val_loss for m in rec.evals]
    best_steps = [step for kind, step in rec.checkpoints if kind == "best"]
    improving = [m.step for i, m in enumerate(rec.evals) if m.step > 0 and m.val_loss < min(vals[:i])]
    assert best_steps == improving
    assert read_checkpoint(tmp_path / "last.pt")["step"] == 60
    if best_steps:
        assert read_checkpoint(tmp_path / "best.pt")["step"] == best_steps[-1]
    assert result.best_val_loss == min(vals)


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_stop_and_resume_gives_the_same_losses(tmp_path, tiny_config, cache_dir, optimizer):
    cfg = tiny_config(steps=20, eval_every=10, dropout=0.2, optimizer=optimizer)  # dropout: the RNG state too
    full = Recorder()
    train(cfg, tmp_path / "full", callbacks=full, cache_dir=cache_dir)

    first = Recorder(stop_after=15)
    r1 = train(cfg, tmp_path / "split", callbacks=first, cache_dir=cache_dir)
    assert r1.stopped and r1.steps_done == 15
    second = Recorder()
    r2 = train(cfg, tmp_path / "split", callbacks=second, cache_dir=cache_dir, resume=True)
    assert second.started["resumed"] and second.started["start_step"] == 15 and r2.steps_done == 20

    expected = {m.step: (m.train_loss, m.val_loss) for m in full.evals}
    got = {m.step: (m.train_loss, m.val_loss) for m in first.evals + second.evals}
    assert got.keys() == expected.keys() == {0, 10, 20}
    for step in expected:
        assert got[step] == pytest.approx(expected[step], abs=1e-6)
    rows = read_metrics_csv(tmp_path / "split" / "metrics.csv")
    assert [r.step for r in rows] == [0, 5, 10, 15, 20]  # earlier rows kept, none twice


@pytest.mark.slow  # 31 s on 2 cores: two 200-step trainings
def test_bf16_curve_within_005_of_fp32_over_200_steps(tmp_path, tiny_config, cache_dir):
    curves = {}
    for precision in ("fp32", "bf16"):
        rec = Recorder()
        cfg = tiny_config(steps=200, eval_every=50, log_every=50, precision=precision, sample_tokens=0,
                          batch_size=2, eval_batches=3)
        train(cfg, tmp_path / precision, callbacks=rec, cache_dir=cache_dir)
        curves[precision] = [(m.step, m.train_loss, m.val_loss) for m in rec.evals]
    assert [c[0] for c in curves["fp32"]] == [0, 50, 100, 150, 200]
    for (step, t32, v32), (_, t16, v16) in zip(curves["fp32"], curves["bf16"], strict=True):
        assert abs(v32 - v16) < 0.05, f"val at step {step}: fp32 {v32:.4f} vs bf16 {v16:.4f}"
        assert abs(t32 - t16) < 0.05, f"train at step {step}: fp32 {t32:.4f} vs bf16 {t16:.4f}"


def test_grad_accumulation_counts_tokens(tmp_path, tiny_config, cache_dir):
    rec = Recorder()
    train(tiny_config(steps=10, grad_accum=3, eval_every=10, sample_tokens=0), tmp_path, callbacks=rec, cache_dir=cache_dir)
    assert rec.steps[-1].tokens_seen == 10 * 3 * 8 * 128


def test_resume_refuses_another_model(tmp_path, tiny_config, cache_dir):
    train(tiny_config(steps=5, eval_every=5, sample_tokens=0), tmp_path, cache_dir=cache_dir)
    with pytest.raises(ValueError, match="different model"):
        Trainer(tiny_config(steps=10, arch="classic"), tmp_path, cache_dir=cache_dir, resume=True)
    with pytest.raises(ValueError, match=r"^the checkpoint's optimizer state is AdamW's but this run uses "
                       r"Muon \+ AdamW; cannot resume$"):
        Trainer(tiny_config(steps=10, optimizer="muon"), tmp_path, cache_dir=cache_dir, resume=True)


@pytest.mark.slow
@pytest.mark.parametrize("mode, step", [("default", {}), ("reduce-overhead", {}),
                                        ("reduce-overhead", {"optimizer": "muon", "compile_optimizer": True})],
                         ids=["default", "reduce-overhead", "reduce-overhead-muon-step-compiled"])
def test_a_compiled_run_follows_the_eager_one_and_saves_plain_weights(tmp_path, tiny_config, cache_dir, mode, step):
    """Each compile mode the option offers trains the same curve as eager PyTorch, the optimizer's step compiled
    too with ``compile_optimizer`` (on the CPU reduce-overhead runs without CUDA graphs: the path, the per-step
    graph marks included; tests/test_gpu.py runs the graphs)."""
    losses = {}
    optimizer = {"optimizer": step.get("optimizer", "adamw")}
    for name, options in {"eager": optimizer, mode: {"compile": True, "compile_mode": mode, **step}}.items():
        result = train(tiny_config(steps=10, eval_every=5, sample_tokens=0, **options), tmp_path / name,
                       cache_dir=cache_dir)
        assert result.steps_done == 10
        losses[name] = [(m.train_loss, m.val_loss) for m in read_metrics_csv(tmp_path / name / "metrics.csv")]
    torch.testing.assert_close(losses[mode], losses["eager"], rtol=1e-4, atol=1e-4)
    state = read_checkpoint(tmp_path / mode / "best.pt")
    assert not any("_orig_mod" in k for k in state["model"])


# peak memory of the holmes preset on an H200 by batch (BENCHMARKS.md, "GPU: holmes sweep"): fp32 and bf16, MiB
H200_PEAK_MIB = {8: (486, 372), 32: (1551, 1046), 64: (2971, 1950), 128: (5810, 3757), 256: (11488, 7372)}


@pytest.mark.parametrize("batch", sorted(H200_PEAK_MIB))
def test_the_memory_estimate_is_a_lower_bound_close_to_measured_peaks(batch):
    """What the dashboard refuses runs with: never above what a run really took, and within 20% of it."""
    for precision, measured in zip(("fp32", "bf16"), H200_PEAK_MIB[batch], strict=True):
        estimate = TrainConfig(preset="holmes", batch_size=batch, precision=precision).memory_estimate() / 2**20
        assert 0.8 * measured <= estimate <= measured, (precision, estimate, measured)


def test_the_memory_estimate_follows_its_options():
    base = TrainConfig(preset="holmes", batch_size=64, precision="fp32")
    checkpointed = TrainConfig(preset="holmes", batch_size=64, precision="fp32", grad_checkpointing=True)
    assert checkpointed.memory_estimate() < base.memory_estimate() / 2  # the logits stay
    assert base.memory_estimate(processes=2) < base.memory_estimate()  # the batch is split among processes
