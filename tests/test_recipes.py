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
from app.web.pages import recipe_choices
from tinygpt.device import cpu_has_bf16, cpu_name
from tinygpt.optimization import lr_at
from tinygpt.recipes import FAST_BASE, RECIPES, TIMES_TO_TARGET, closest_times, guide
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


def test_fast_on_a_gpu_is_the_series_options_with_cuda_graphs_and_the_given_ones_win():
    series = TrainConfig().validate().to_dict()
    for device in ("cuda", "cuda:1"):
        config = TrainConfig.from_dict({"recipe": "fast", "device": device})
        assert config.to_dict() == {**series, "recipe": "fast", "device": device, "compile": True,
                                    "compile_mode": "reduce-overhead"}
    given = TrainConfig.from_dict({"recipe": "fast", "device": "cuda", "compile_mode": "default", "steps": 9})
    assert (given.compile, given.compile_mode, given.steps, given.optimizer) == (True, "default", 9, "adamw")
    # one submission on a CPU and a GPU compares them: the same (the recipe's own) options on both
    both = RunCreate.model_validate({"recipe": "fast", "device": ["cpu", "cuda"]})
    assert (both.optimizer, both.n_layers, both.compile) == ("muon", 4, False)
    # the other devices take the CPU's recipe
    for device in ("cpu", "mps", "xla"):
        config = TrainConfig.from_dict({"recipe": "fast", "device": device})
        assert {k: getattr(config, k) for k in FAST} == FAST and not config.compile


def test_device_auto_takes_the_recipe_of_the_device_auto_picks(monkeypatch):
    import torch

    import tinygpt.device

    for picked, optimizer, compiled in (("cuda", "adamw", True), ("cpu", "muon", False)):
        monkeypatch.setattr(tinygpt.device, "resolve_device", lambda name, picked=picked: torch.device(picked))
        config = TrainConfig.from_dict({"recipe": "fast"})
        assert (config.device, config.optimizer, config.compile) == ("auto", optimizer, compiled)


def test_the_closest_recorded_time_is_the_same_model_then_the_same_bf16_ability():
    h200 = [t for t in TIMES_TO_TARGET if t.recipe == "fast" and t.kind == "cuda"]
    assert closest_times("fast", "cuda", "NVIDIA H200", True) == (h200, True)
    assert closest_times("fast", "cuda", "NVIDIA H100 80GB HBM3", True) == (h200, False)
    assert closest_times("fast", "mps", "Apple GPU (MPS)") == ([], False)
    assert closest_times("fast-best", "cuda", "NVIDIA H200", True) == ([], False)
    assert guide("fast", "cuda", "NVIDIA H100 80GB HBM3", True) == (
        "On a CUDA GPU: the series' own options with CUDA graphs (compile, reduce-overhead), the fastest way to "
        "holmes 3.76 measured on a GPU (docs/SPEEDRUN.md sections 14 and 18): the CPU's fast recipe is launch-bound "
        "there and took 1.3-1.6x the series' eager time. Measured to holmes 3.76: 8 s at bf16 (the slowest of 2 "
        "seeds) on an NVIDIA H200, the closest hardware recorded.")
    assert guide("fast-best", "mps").endswith(". No time to holmes 3.76 recorded on a mps device yet.")


def test_every_recorded_time_to_target_is_the_benchmarks_own():
    gpu = json.loads((ROOT / "benchmarks" / "gpu_results.json").read_text())["speedrun"]
    measured = {("series", "cuda", "bf16"): (round(gpu["series_run"]["train_sec"], 1), 1),
                ("fast", "cuda", "bf16"): (max(gpu["graphs"]["series"]["train_sec"]),
                                           len(gpu["graphs"]["series"]["train_sec"]))}
    cpu = json.loads((ROOT / "benchmarks" / "cpu_bf16_results.json").read_text())
    for at in cpu["speedrun"]["precisions"]:
        measured[("fast", "cpu", at["resolved_precision"])] = (round(at["fast_slowest_sec"], 1), len(at["fast_runs"]))
        measured[("series", "cpu", at["resolved_precision"])] = (round(at["series_sec_to_target"], 1), 1)
    assert {(t.recipe, t.kind, t.precision): (t.seconds, t.seeds) for t in TIMES_TO_TARGET} == measured
    assert {t.model for t in TIMES_TO_TARGET if t.kind == "cpu"} == {cpu["machine"].split(",")[0]}


def test_the_form_offers_each_device_its_recipes_values_and_guides(monkeypatch):
    import torch

    import tinygpt.device

    monkeypatch.setattr(tinygpt.device, "resolve_device", lambda name: torch.device("cuda"))
    devices = [
        {"device": "cpu", "available": True, "reason": None,
         "description": {"type": "cpu", "name": "AMD EPYC", "auto_precision": "fp32"}},
        {"device": "cuda:0", "available": True, "reason": None,
         "description": {"type": "cuda", "name": "NVIDIA H100 80GB HBM3", "bf16": True}},
        {"device": "mps", "available": False, "reason": "no Apple GPU", "description": None},
    ]
    choices = recipe_choices(devices)
    assert {name: c["kind"] for name, c in choices.items()} == {"auto": "cuda", "cpu": "cpu", "cuda:0": "cuda"}
    assert choices["auto"] == choices["cuda:0"]
    gpu_fast, cpu_fast = choices["cuda:0"]["values"]["fast"], choices["cpu"]["values"]["fast"]
    assert (gpu_fast["compile"], gpu_fast["compile_mode"], gpu_fast["optimizer"], gpu_fast["n_layers"]) == \
        (True, "reduce-overhead", "adamw", None)
    assert {k: cpu_fast[k] for k in FAST} == FAST and (cpu_fast["compile"], cpu_fast["compile_mode"]) == (False, "default")
    assert choices["cuda:0"]["guides"] == {r: guide(r, "cuda", "NVIDIA H100 80GB HBM3", True) for r in RECIPES}
    assert choices["cpu"]["guides"]["fast"] == guide("fast", "cpu", "AMD EPYC", False)


def test_the_form_says_what_the_chosen_recipe_is_for_here(make_app):
    from markupsafe import escape

    page = make_app().get("/new", params={"recipe": "fast"})
    said = re.search(r'<p class="muted" id="recipe-info" aria-live="polite">([^<]*)</p>', page.text)[1]
    assert said == escape(guide("fast", "cpu", cpu_name(), cpu_has_bf16()))


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


def test_the_gpu_checks_trainings_are_runs_tinygpt_train_takes():
    """recipes/gpu-runs/check.txt is run only where a GPU is lent: each line must be a run ``tinygpt train``
    accepts there, and the line that trains the CPU's fast recipe on the GPU must be that recipe's options."""
    from tinygpt.cli import build_parser

    parser = build_parser()
    lines = [line.split() for line in (ROOT / "recipes" / "gpu-runs" / "check.txt").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    configs = {}
    for name, *options in lines:
        args = parser.parse_args(["train", *options, "--device", "cuda", "--sample-tokens", "0", "--no-progress",
                                  "--out", "runs/" + name])
        configs[name] = TrainConfig.from_dict({n: getattr(args, n) for n in OPTIONS if hasattr(args, n)})
    assert len(configs) == len(lines) >= 10
    cpu_fast = configs["cpu-fast-graphs"]
    assert {k: getattr(cpu_fast, k) for k in FAST} == FAST
    assert (cpu_fast.compile, cpu_fast.compile_mode, cpu_fast.compile_optimizer, cpu_fast.device) == (
        True, "reduce-overhead", True, "cuda")
