"""Recipes (tinygpt/recipes.py): a named set of run options fills the options not given, the same way in the
library, ``tinygpt train --recipe``, the API, the form and a sweep's base; the series recipe is the declaration's
defaults. And the sweeps kept in the repository (recipes/sweeps/, the searches docs/SPEEDRUN.md reports) are
sweeps the dashboard takes as they are: each submitted to a fresh home plans every point of its grid, its first
trial queued with the swept options."""

from __future__ import annotations

import json
import math
import re

import pytest
import yaml
from sqlmodel import select

from app.db import session_scope
from app.models import Run, RunCreate
from app.services.sweeps import sweep_detail
from app.settings import Settings
from app.sweep_submit import submit_local
from tinygpt.optimization import lr_at
from tinygpt.recipes import FAST_BASE, RECIPES
from tinygpt.run_config import OPTIONS, TrainConfig

from .service_helpers import ROOT, tinygpt_here

FAST = RECIPES["fast"].options


def test_a_recipe_fills_the_options_not_given_and_the_given_ones_win():
    config = TrainConfig.from_dict({"recipe": "fast", "lr": 0.005, "steps": 12})
    assert (config.recipe, config.lr, config.steps) == ("fast", 0.005, 12)
    for name, value in FAST.items():
        if name not in ("lr", "steps"):
            assert getattr(config, name) == value, name
    assert config.optimizer == "muon" and config.qk_norm and config.attn_dropout == 0.0
    # the series recipe is the declaration's defaults, unchanged; no recipe given is the series'
    assert TrainConfig.from_dict({}).to_dict() == TrainConfig().validate().to_dict()
    assert TrainConfig.from_dict({"recipe": "series"}).to_dict() == TrainConfig().validate().to_dict()


@pytest.mark.parametrize("name", RECIPES)
def test_every_recipe_sets_run_options_to_values_they_accept(name):
    assert set(RECIPES[name].options) <= set(OPTIONS) - {"recipe"}
    config = TrainConfig.from_dict({"recipe": name})
    assert {k: getattr(config, k) for k in RECIPES[name].options} == RECIPES[name].options


def test_the_best_model_recipe_is_the_fast_recipes_model_at_batch_32_for_1000_steps_with_weight_decay():
    best = RECIPES["fast-best"].options
    assert {k: best[k] for k in FAST_BASE} == FAST_BASE
    assert {k: v for k, v in best.items() if k not in FAST_BASE} == {
        "batch_size": 32, "steps": 1000, "eval_every": 24, "muon_weight_decay": 0.15, "min_lr_ratio": 0.0}
    config = TrainConfig.from_dict({"recipe": "fast-best"})
    # as measured (docs/SPEEDRUN.md section 17): the decay down to zero at the last step, dropout from the first
    assert (config.min_lr_ratio, config.dropout_start, config.muon_weight_decay) == (0.0, 0.0, 0.15)
    assert lr_at(config.steps, config) == 0.0 < lr_at(config.steps - 1, config)
    assert config.batch_size * config.steps * config.model_config().context == 8_192_000  # within the series' 12.3M


def test_the_fast_recipe_decays_to_zero_and_starts_dropout_late():
    config = TrainConfig.from_dict({"recipe": "fast"})
    assert (config.steps, config.min_lr_ratio, config.dropout_start) == (1008, 0.0, 0.5)
    assert [config.dropout_on(step) for step in (0, 503, 504, 1007)] == [False, False, True, True]


def test_an_unknown_recipe_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="^recipe must be one of series, fast, fast-best; got 'fastest'$"):
        TrainConfig.from_dict({"recipe": "fastest"})


def test_tinygpt_train_recipe_flag(tmp_path, slice_path):
    out = tmp_path / "run"
    tinygpt_here("train", "--recipe", "fast", "--preset", "tiny", "--steps", "2", "--eval-every", "2",
                 "--eval-batches", "1", "--batch-size", "2", "--sample-tokens", "0", "--device", "cpu",
                 "--corpus", slice_path, "--out", out, "--no-progress", module="tinygpt.cli", check=True)
    config = json.loads((out / "config.json").read_text())["train"]
    assert (config["recipe"], config["preset"], config["steps"], config["batch_size"]) == ("fast", "tiny", 2, 2)
    assert {k: config[k] for k in ("optimizer", "lr_schedule", "qk_norm", "dropout", "decay_fraction", "lr")} == \
        {k: FAST[k] for k in ("optimizer", "lr_schedule", "qk_norm", "dropout", "decay_fraction", "lr")}
    refused = tinygpt_here("train", "--recipe", "fastest", "--out", out, module="tinygpt.cli")
    assert refused.returncode == 2 and "recipe must be one of series, fast, fast-best; got 'fastest'" in refused.stderr


def test_the_api_applies_a_recipe_and_lists_them(make_app):
    client = make_app()
    assert [r["name"] for r in client.get("/api/recipes").json()] == ["series", "fast", "fast-best"]
    assert client.get("/api/recipes").json()[1]["options"] == FAST
    created = client.post("/api/runs", json={"recipe": "fast", "preset": "tiny", "steps": 5, "device": "cpu"})
    assert created.status_code == 201, created.text
    config = created.json()[0]["config"]
    assert (config["recipe"], config["preset"], config["steps"], config["optimizer"], config["qk_norm"]) == \
        ("fast", "tiny", 5, "muon", True)
    refused = client.post("/api/runs", json={"recipe": "fastest"})
    assert refused.status_code == 422
    assert [(e["loc"][-1], e["msg"]) for e in refused.json()["detail"]] == \
        [("recipe", "recipe must be one of series, fast, fast-best; got 'fastest'")]


def test_the_form_opens_filled_with_a_recipe(make_app):
    client = make_app()
    page = client.get("/new", params={"recipe": "fast"})
    assert page.status_code == 200
    assert '<option value="muon" selected>' in page.text and '<option value="fast" selected>' in page.text
    assert re.search(r'<input name="steps" [^>]* value="(\d+)"', page.text)[1] == str(FAST["steps"])
    assert '<input type="checkbox" name="qk_norm" value="1" checked>' in page.text
    refused = client.get("/new", params={"recipe": "fats"})
    assert refused.status_code == 422 and "unknown recipe &#39;fats&#39;: did you mean &#39;fast&#39;?" in refused.text


def test_a_sweep_over_recipes_queues_each_recipe_with_the_base_winning(tmp_path, slice_path):
    settings = Settings(home=tmp_path, holmes_path=slice_path)
    sweep = submit_local(yaml.safe_dump({
        "name": "recipes", "method": "grid", "parallel": 2,
        "base": {"preset": "tiny", "steps": 4, "eval_every": 2, "device": "cpu"},
        "parameters": {"recipe": {"values": ["series", "fast"]}},
    }), settings)
    with session_scope(settings) as s:
        trials = s.exec(select(Run).where(Run.sweep_id == sweep["id"])).all()
    # stored: the options given; shown (API, page): the base every trial starts from, defaults included
    with session_scope(settings) as s:
        shown = sweep_detail(s, sweep_id=sweep["id"], settings=settings).config["base"]
    assert shown == {**RunCreate.model_validate({}).model_dump(mode="json", exclude={"name", "tags"}),
                                       "preset": "tiny", "steps": 4, "eval_every": 2, "device": "cpu"}
    by_recipe = {t.config["recipe"]: t.config for t in trials}
    assert {r: (c["optimizer"], c["qk_norm"], c["steps"], c["preset"]) for r, c in by_recipe.items()} == \
        {"series": ("adamw", False, 4, "tiny"), "fast": ("muon", True, 4, "tiny")}

SWEEPS = sorted((ROOT / "recipes" / "sweeps").glob("*.yaml"))


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.name)
def test_a_kept_sweep_is_taken_as_it_is(path, tmp_path, slice_path):
    config = yaml.safe_load(path.read_text())
    settings = Settings(home=tmp_path, holmes_path=slice_path)
    sweep = submit_local(path.read_text(), settings)
    assert sweep["name"] == path.stem
    if config["method"] == "grid":
        assert sweep["trials_planned"] == math.prod(len(p.get("values", [None])) for p in config["parameters"].values())
    with session_scope(settings) as s:
        started = s.exec(select(Run).where(Run.sweep_id == sweep["id"])).all()
    assert len(started) == min(config["parallel"], sweep["trials_planned"] or config["parallel"])  # as many as may run at once
    for run in started:
        for name, value in config["base"].items():
            assert run.config.get(name, value) == value, name
        for name, parameter in config["parameters"].items():
            assert run.config[name] in parameter.get("values", [parameter.get("value")]), name
