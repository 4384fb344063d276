"""The run options, declared once (tinygpt/run_config.py, tinygpt/options.py) and read by every layer: for
every option, the library, `tinygpt train` and the API accept its default and an in-range value and
refuse an out-of-range one with the same message, naming it."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch.nn import functional as F

from app.models import TRAINING_OPTIONS, RunCreate
from tinygpt.cli import build_parser
from tinygpt.options import Option, markdown_table
from tinygpt.records import read_metrics_csv
from tinygpt.run_config import OPTIONS, TrainConfig
from tinygpt.train import train, training_loss

from .service_helpers import ROOT

SIZES = {"d_model": 128, "n_heads": 8, "n_layers": 2, "context": 64}  # sizes that fit the default preset


def good_value(spec: Option) -> object:
    """An accepted value other than the default."""
    if spec.name in SIZES:
        return SIZES[spec.name]
    if spec.kind is bool:
        return not spec.default
    if spec.choices:
        return spec.choices[-1]
    if spec.kind is str:
        return "Watson" if spec.name == "sample_prompt" else "cpu"
    low = spec.minimum if spec.minimum is not None else 0
    value = low + 1 if spec.gt is not None or spec.kind is int else (low + (spec.maximum or low + 2)) / 2
    return spec.kind(value)


def bad_value(spec: Option) -> object | None:
    """A value of the right type that the option refuses (None: every value of its type is fine)."""
    if spec.choices:
        return "no-such-choice"
    if spec.max_length is not None:
        return "x" * (spec.max_length + 1)
    if spec.maximum is not None:
        return spec.kind(spec.maximum + 1)
    return None


def bad_message(spec: Option) -> str:
    value = bad_value(spec)
    if spec.choices:
        return f"{spec.name} must be one of {', '.join(spec.choices)}; got {value!r}"
    if spec.max_length is not None:
        return f"{spec.name} must be at most {spec.max_length} characters, got {len(value)}"
    return f"{spec.name} must be {spec.range_text()}, got {value!r}"


REFUSABLE = [spec for spec in OPTIONS.values() if bad_value(spec) is not None]


def test_every_option_has_a_group_help_and_a_checked_default():
    for spec in OPTIONS.values():
        assert spec.help and spec.group
        assert spec.check(spec.default) == spec.default
    assert set(TRAINING_OPTIONS) == set(OPTIONS) - {"device"}  # the worker's slot decides the device


@pytest.mark.parametrize("spec", OPTIONS.values(), ids=lambda s: s.name)
def test_library_accepts_default_and_good_value(spec):
    TrainConfig(**{spec.name: spec.default}).validate()
    assert getattr(TrainConfig(**{spec.name: good_value(spec)}).validate(), spec.name) == good_value(spec)


@pytest.mark.parametrize("spec", REFUSABLE, ids=lambda s: s.name)
def test_library_and_api_refuse_a_bad_value_with_one_message(spec):
    with pytest.raises(ValueError) as err:
        TrainConfig(**{spec.name: bad_value(spec)}).validate()
    assert str(err.value) == bad_message(spec)
    if spec.name in TRAINING_OPTIONS:
        with pytest.raises(ValueError) as api:
            RunCreate.model_validate({spec.name: bad_value(spec)})
        [error] = api.value.errors()
        assert error["loc"] == (spec.name,) and error["msg"] == bad_message(spec)


@pytest.mark.parametrize("spec", [s for s in REFUSABLE if s.kind is not bool], ids=lambda s: s.name)
def test_tinygpt_train_flag_refuses_a_bad_value_with_the_same_message(spec, capsys):
    """The command's own parser, in this process (one real `tinygpt train` below)."""
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["train", "--out", "x", spec.flag, str(bad_value(spec))])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"tinygpt train: error: argument {spec.flag}: {bad_message(spec)}")


@pytest.mark.parametrize("spec", OPTIONS.values(), ids=lambda s: s.name)
def test_tinygpt_train_flag_takes_a_good_value(spec):
    value = good_value(spec)
    argv = [spec.flag if value else f"--no-{spec.flag[2:]}"] if spec.kind is bool else [spec.flag, str(value)]
    args = build_parser().parse_args(["train", "--out", "x", *argv])
    assert getattr(args, spec.name) == value


def test_a_real_tinygpt_train_refuses_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tinygpt", "train", "--out", str(tmp_path), "--lr", "5"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == "tinygpt train: error: argument --lr: lr must be in (0, 1], got 5.0"


def test_tinygpt_train_help_shows_every_option_in_its_group():
    out = subprocess.run([sys.executable, "-m", "tinygpt", "train", "--help"], capture_output=True, text=True,
                         cwd=ROOT, timeout=60).stdout
    for group in ("model options:", "data and device options:", "optimisation options:", "schedule options:",
                  "evaluation and samples options:"):
        assert group in out
    for spec in OPTIONS.values():
        assert spec.flag in out


def test_api_defaults_are_the_declarations():
    run = RunCreate.model_validate({})
    for name, spec in TRAINING_OPTIONS.items():
        assert getattr(run, name) == spec.default, name


def test_api_schema_carries_bounds_choices_and_help():
    props = RunCreate.model_json_schema()["properties"]
    assert props["lr"]["exclusiveMinimum"] == 0 and props["lr"]["maximum"] == 1
    assert props["precision"]["enum"] == ["auto", "fp32", "bf16", "fp16"]
    assert props["warmup"]["description"] == "linear warmup (unset: min(200, steps / 10))"
    assert props["dropout"]["x-group"] == "model" and props["dropout"]["x-advanced"] is True


def test_the_readme_table_is_the_declaration():
    readme = (ROOT / "README.md").read_text()
    table = readme.split("<!-- options:start -->\n")[1].split("\n<!-- options:end -->")[0]
    assert table == markdown_table(OPTIONS), "regenerate it: python -m tinygpt.options"


# -- label_smoothing: the first option added through the declaration alone ---------------------------
def test_label_smoothing_known_answer():
    """(1 - e) * cross-entropy + e * the mean of -log p over the vocabulary, by hand and by torch."""
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 5)  # (B, T, vocab)
    targets = torch.randint(5, (2, 3))
    log_p = logits.log_softmax(-1)
    ce = -log_p.gather(-1, targets.unsqueeze(-1)).mean()
    uniform = -log_p.mean(-1).mean()
    for eps in (0.0, 0.1, 0.5):
        loss = training_loss(logits, targets, TrainConfig(label_smoothing=eps))
        assert torch.allclose(loss, (1 - eps) * ce + eps * uniform, atol=1e-6)
        assert torch.allclose(loss, F.cross_entropy(logits.view(-1, 5), targets.view(-1), label_smoothing=eps))


def test_label_smoothing_changes_training_but_not_evaluation(tiny_config, tmp_path):
    rows = {}
    for name, eps in (("plain", 0.0), ("smooth", 0.2)):
        train(tiny_config(steps=4, eval_every=2, log_every=1, label_smoothing=eps), tmp_path / name)
        rows[name] = {m.step: m for m in read_metrics_csv(tmp_path / name / "metrics.csv")}
    assert rows["plain"][0].val_loss == rows["smooth"][0].val_loss  # the same model, the same evaluation
    assert rows["smooth"][1].train_loss > rows["plain"][1].train_loss  # the uniform part, on the same logits


# -- the model's size: options that override the preset -------------------------------------------
def test_model_options_override_the_preset():
    config = TrainConfig(preset="tiny", d_model=96, n_heads=6, n_layers=2, context=64, norm="layernorm").validate()
    model = config.model_config()
    assert (model.d_model, model.n_heads, model.n_layers, model.context, model.norm, model.mlp) == (
        96, 6, 2, 64, "layernorm", "swiglu")  # the rest stays the preset's and its architecture's
    assert (model.qk_norm, model.untied_head) == (False, False)
    speedrun = TrainConfig(preset="tiny", mlp="relu2", qk_norm=True, untied_head=True).validate().model_config()
    assert (speedrun.mlp, speedrun.qk_norm, speedrun.untied_head, speedrun.norm) == ("relu2", True, True, "rmsnorm")


@pytest.mark.parametrize("body, message", [
    ({"d_model": 100, "n_heads": 3}, "d_model (100) must be divisible by n_heads (3)"),
    ({"d_model": 96, "n_heads": 32}, "pos 'rope' needs an even head dimension: d_model (96) / n_heads (32) = 3"),
])
def test_sizes_that_do_not_fit_are_refused_naming_both(body, message):
    with pytest.raises(ValueError) as lib:
        TrainConfig(preset="tiny", **body).validate()
    assert str(lib.value) == message
    with pytest.raises(ValueError) as api:
        RunCreate.model_validate({"preset": "tiny", **body})
    assert [e["msg"] for e in api.value.errors()] == [message]
