"""A W&B sweep configuration as a W&B user writes it (in-process): hyperband given as max_iter and s gets W&B's
lowest band as its min_iter, integer bounds stay integers, and keys only W&B has are refused saying what they are
for there, never dropped in silence."""

from __future__ import annotations

import math
from statistics import NormalDist

import pytest

BASE = {"preset": "tiny", "device": "cpu", "steps": 20, "eval_every": 2, "batch_size": 4}


def sweep(**config: object) -> dict:
    return {"method": "random", "run_cap": 2, "parameters": {"n_layers": {"min": 1, "max": 3}}, "base": BASE, **config}


@pytest.mark.parametrize("early, min_iter", [
    ({"type": "hyperband", "max_iter": 27, "s": 2, "eta": 3}, 3),  # W&B's bands 9 and 3
    ({"type": "hyperband", "max_iter": 8, "s": 5, "eta": 2}, 1),  # 4, 2, 1: then below 1
    ({"type": "hyperband", "min_iter": 2}, 2),
    ({"type": "median"}, 1),
])
def test_hyperband_bands_as_wandb_derives_them(make_app, early, min_iter):
    response = make_app().post("/api/sweeps", json=sweep(early_terminate=early))
    assert response.status_code == 201, response.text
    assert response.json()["config"]["early_terminate"]["min_iter"] == min_iter


@pytest.mark.parametrize("early, message", [
    ({"type": "hyperband", "max_iter": 27}, "Value error, max_iter 27 with s 0 and eta 3 makes no band: give s of 1 "
                                            "or more (W&B's default 0 makes none), a smaller eta, or min_iter"),
    ({"type": "hyperband", "max_iter": 27, "s": 2, "min_iter": 1}, "Value error, min_iter 1 is not the lowest band of "
                                                                   "max_iter 27 with s 2 and eta 3 (3): give one form"),
])
def test_hyperband_forms_that_make_no_sense_are_refused(make_app, early, message):
    response = make_app().post("/api/sweeps", json=sweep(early_terminate=early))
    assert response.status_code == 422
    error = response.json()["detail"][0]
    assert (error["loc"], error["msg"]) == (["body", "early_terminate"], message)


def test_integer_bounds_stay_integers(make_app):
    config = make_app().post("/api/sweeps", json=sweep()).json()["config"]
    assert config["parameters"]["n_layers"]["min"] == 1 and isinstance(config["parameters"]["n_layers"]["min"], int)
    assert config["parameters"]["n_layers"]["max"] == 3 and isinstance(config["parameters"]["n_layers"]["max"], int)


def test_keys_only_wandb_has_are_refused_saying_what_they_are_for(make_app):
    response = make_app().post("/api/sweeps", json=sweep(program="train.py", project="holmes"))
    assert response.status_code == 422
    assert response.json()["detail"][0]["msg"] == (
        "Value error, program is W&B's (the script its agent runs); project is W&B's (the W&B project the runs go "
        "to): a sweep here trains the run options of base and parameters; leave them out")


@pytest.mark.parametrize("target, trials, status", [(4.0, 1, "finished"), (3.5, 2, "running")])
def test_a_reached_metric_target_ends_the_sweep(make_app, target, trials, status):
    """W&B's metric.target: once a finished trial's metric is at most it, no more trials; the sweep ends."""
    client = make_app()
    config = sweep(metric={"name": "val_loss", "goal": "minimize", "target": target}, run_cap=5, parallel=1)
    created = client.post("/api/sweeps", json=config).json()
    assert created["config"]["metric"]["target"] == target
    # its first trial succeeded with 3.9 (the worker's part)
    after = finish(client, {created["trials"][0]["run_id"]: ("succeeded", 3.9)}, created["id"])
    assert (len(after["trials"]), after["status"]) == (trials, status)


# -- every W&B distribution, with its W&B meaning ---------------------------------------------------
LN100 = math.log(100)
LOWEST = NormalDist(0.001, 0.001).inv_cdf(0.001)  # normal(0.001, 0.001)'s draws start at its 0.001 quantile


@pytest.mark.parametrize("parameter, u, expected", [
    ({"min": 2.0, "max": 6.0}, 0.25, 3.0),  # uniform, inferred from float bounds
    ({"distribution": "q_uniform", "min": 0, "max": 10, "q": 3}, 0.5, 6),  # round(5 / 3) * 3, a whole q: an int
    ({"distribution": "q_uniform", "min": 0.0, "max": 1.0, "q": 0.1}, 0.3, 0.3),  # multiples of q, not 0.30000000000000004
    ({"distribution": "log_uniform", "min": 0.0, "max": LN100}, 0.5, 10.0),  # bounds in natural logarithms
    ({"distribution": "q_log_uniform", "min": 0.0, "max": LN100, "q": 4}, 0.5, 12),  # round(10 / 4) * 4
    ({"distribution": "log_uniform_values", "min": 1.0, "max": 100.0}, 0.5, 10.0),
    ({"distribution": "q_log_uniform_values", "min": 16, "max": 256, "q": 8}, 0.5, 64),
    ({"distribution": "inv_log_uniform", "min": 0.0, "max": LN100}, 0.25, 100 ** -0.75),  # exp(-x), x from 0.75
    ({"distribution": "inv_log_uniform_values", "min": 0.01, "max": 1.0}, 0.5, 0.1),
    ({"distribution": "normal", "mu": 0.1, "sigma": 0.02}, 0.975, 0.1 + 1.959963984540054 * 0.02),
    ({"distribution": "normal"}, 0.5, 0.0),  # W&B's defaults: mu 0, sigma 1
    ({"distribution": "q_normal", "mu": 0.1, "sigma": 0.02, "q": 0.05}, 0.975, 0.15),  # 0.139 to the nearest 0.05
    ({"distribution": "log_normal", "mu": math.log(1e-3), "sigma": 1.0}, 0.5, 1e-3),
    ({"distribution": "q_log_normal", "mu": math.log(300), "sigma": 0.5, "q": 64}, 0.5, 320),  # round(300 / 64) * 64
    ({"distribution": "beta", "a": 2, "b": 1}, 0.25, 0.5),  # CDF x^2
    ({"distribution": "beta"}, 0.3, 0.3),  # W&B's defaults a = b = 1: uniform on [0, 1]
    ({"distribution": "q_beta", "a": 2, "b": 1, "q": 0.2}, 0.25, 0.4),  # 0.5 to the nearest 0.2 (half to even)
    ({"values": ["adamw", "muon"], "probabilities": [0.2, 0.8]}, 0.19, "adamw"),
    ({"values": ["adamw", "muon"], "probabilities": [0.2, 0.8]}, 0.21, "muon"),
])
def test_each_distribution_gives_wandbs_value_at_a_quantile(parameter, u, expected):
    from app.models.sweep_distributions import filled, ppf

    value = ppf(filled(parameter), u)
    assert type(value) is type(expected)
    assert value == expected if isinstance(expected, str) else value == pytest.approx(expected, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("parameter, stored", [
    ({"distribution": "normal"}, {"distribution": "normal", "mu": 0.0, "sigma": 1.0}),
    ({"distribution": "q_log_normal", "sigma": 0.5}, {"distribution": "q_log_normal", "mu": 0.0, "sigma": 0.5, "q": 1}),
    ({"distribution": "beta", "a": 3}, {"distribution": "beta", "a": 3.0, "b": 1.0}),
    ({"distribution": "q_uniform", "min": 0, "max": 4}, {"distribution": "q_uniform", "min": 0, "max": 4, "q": 1}),
    ({"min": 1, "max": 3}, {"distribution": "int_uniform", "min": 1, "max": 3}),
    ({"values": [1, 2], "probabilities": [0.5, 0.5]},
     {"distribution": "categorical_w_probabilities", "values": [1, 2], "probabilities": [0.5, 0.5]}),
])
def test_a_parameter_is_stored_with_its_distribution_and_wandbs_defaults(parameter, stored):
    from app.models import SweepCreate
    from app.services.sweeps import sweep_config

    body = SweepCreate.model_validate(sweep(parameters={"weight_decay": parameter}))
    assert sweep_config(body)["parameters"]["weight_decay"] == stored


def test_the_api_shows_a_parameter_as_stored(make_app):
    response = make_app().post("/api/sweeps", json=sweep(parameters={"weight_decay": {"distribution": "beta", "b": 9}}))
    assert response.status_code == 201, response.text
    assert response.json()["config"]["parameters"]["weight_decay"] == {"distribution": "beta", "a": 1.0, "b": 9.0}


def test_a_random_sweep_draws_each_distribution_within_the_options_bounds(make_app):
    parameters = {
        "weight_decay": {"distribution": "q_beta", "a": 2, "b": 5, "q": 0.05},
        "lr": {"distribution": "log_normal", "mu": math.log(1e-3), "sigma": 0.5},
        "warmup": {"distribution": "q_normal", "mu": 10, "sigma": 2, "q": 1},
        "dropout": {"distribution": "inv_log_uniform_values", "min": 0.01, "max": 0.1},
        "d_model": {"distribution": "q_log_uniform_values", "min": 32, "max": 128, "q": 32},
        "optimizer": {"values": ["adamw", "muon"], "probabilities": [0.25, 0.75]},
    }
    response = make_app().post("/api/sweeps", json=sweep(parameters=parameters, run_cap=6, parallel=6))
    assert response.status_code == 201, response.text
    trials = [t["params"] for t in response.json()["trials"]]
    assert len(trials) == 6
    for params in trials:
        assert 0 <= params["weight_decay"] <= 1 and round(params["weight_decay"] / 0.05, 9).is_integer()
        assert math.exp(math.log(1e-3) - 3.1 * 0.5) < params["lr"] < math.exp(math.log(1e-3) + 3.1 * 0.5)
        assert isinstance(params["warmup"], int) and 3 <= params["warmup"] <= 17  # 10 +/- 3.09 x 2, rounded
        assert 0.01 <= params["dropout"] <= 0.1
        assert params["d_model"] in (32, 64, 96, 128) and params["optimizer"] in ("adamw", "muon")


@pytest.mark.parametrize("parameter, message", [
    ({"distribution": "normal", "min": 0.0, "max": 0.1},
     "normal takes mu and sigma, not min or max (normal with mean mu and deviation sigma)"),
    ({"min": 0.0, "max": 0.1, "mu": 0.05}, "uniform takes min and max, not mu (a number from min to max)"),
    ({"distribution": "beta", "sigma": 1.0}, "beta takes a and b, not sigma (beta with shapes a and b)"),
    ({"distribution": "q_uniform", "max": 1.0}, "q_uniform needs min (uniform, rounded to a multiple of q)"),
    ({"distribution": "gamma"}, "distribution must be one of constant, categorical, categorical_w_probabilities, "
                                "uniform, int_uniform, q_uniform, log_uniform_values, q_log_uniform_values, log_uniform, "
                                "q_log_uniform, inv_log_uniform_values, inv_log_uniform, normal, q_normal, log_normal, "
                                "q_log_normal, beta, q_beta"),
    ({"values": [0.0, 0.1], "probabilities": [0.5, 0.6]},
     "probabilities must be one per value, none below 0, summing to 1 (got [0.5, 0.6])"),
    ({"values": [0.0, 0.1], "probabilities": [1.0]},
     "probabilities must be one per value, none below 0, summing to 1 (got [1.0])"),
    ({"distribution": "normal", "sigma": 0.0}, "normal's q, sigma, a and b must be more than 0"),
    ({"distribution": "log_uniform_values", "min": 0.0, "max": 0.1}, "log_uniform_values needs min > 0"),
    ({"distribution": "int_uniform", "min": 0.5, "max": 2}, "int_uniform needs whole numbers for min and max"),
    ({}, "give value, values, min and max, or a distribution"),
])
def test_a_parameter_wandb_would_refuse_is_refused_saying_why(make_app, parameter, message):
    response = make_app().post("/api/sweeps", json=sweep(parameters={"dropout": parameter}))
    assert response.status_code == 422
    error = response.json()["detail"][0]
    assert (error["loc"], error["msg"]) == (["body", "parameters", "dropout"], "Value error, " + message)


@pytest.mark.parametrize("name, parameter, method, message", [
    ("lr", {"distribution": "normal", "mu": 0.001, "sigma": 0.001}, "random",  # the draws' central 99.8 %
     f"lowest value {LOWEST}: lr must be in (0, 1], got {LOWEST}"),
    ("n_layers", {"distribution": "normal", "mu": 4, "sigma": 1}, "random",
     "n_layers takes whole numbers: use int_uniform, values, or a q_ distribution with a whole q"),
    ("dropout", {"distribution": "normal", "mu": 0.1, "sigma": 0.02}, "grid",
     "a grid sweep takes values, int_uniform or q_uniform (as W&B's grid does), not normal"),
    ("dropout", {"values": [0.0, 0.1], "probabilities": [0.5, 0.5]}, "grid",
     "a grid sweep tries every value once: probabilities have no meaning there (W&B refuses them too)"),
    ("n_layers", {"min": 1, "max": 5000}, "grid",
     "int_uniform from 1 to 5000 is 5000 points, more than a grid's 1000: give values, or a random or bayes sweep"),
])
def test_a_distribution_that_does_not_fit_the_option_or_method_is_refused(make_app, name, parameter, method, message):
    response = make_app().post("/api/sweeps", json=sweep(method=method, parameters={name: parameter}))
    assert response.status_code == 422
    error = response.json()["detail"][0]
    assert (error["loc"], error["msg"]) == (["body", "parameters", name], message)


def test_a_grid_tries_int_uniform_and_q_uniform_as_wandbs_grid_lists_them(make_app):
    parameters = {"n_layers": {"min": 1, "max": 3}, "dropout": {"distribution": "q_uniform", "min": 0.0, "max": 0.3,
                                                                 "q": 0.1}}
    created = make_app().post("/api/sweeps", json=sweep(method="grid", run_cap=None, parameters=parameters,
                                                        parallel=12)).json()
    assert created["trials_planned"] == 9  # 3 layers x dropout 0.0, 0.1, 0.2 (numpy's arange: max left out)
    tried = sorted((t["params"]["n_layers"], t["params"]["dropout"]) for t in created["trials"])
    assert tried == [(n, d) for n in (1, 2, 3) for d in (0.0, 0.1, 0.2)]


def test_a_wandb_config_with_every_distribution_pasted_as_yaml(make_app):
    text = """
method: random
run_cap: 2
metric: {name: val_loss, goal: minimize}
parameters:
  lr: {distribution: q_log_uniform_values, min: 0.0001, max: 0.01, q: 0.0001}
  dropout: {distribution: inv_log_uniform, min: 2.3, max: 4.6}
  weight_decay: {distribution: q_beta, a: 1, b: 3, q: 0.01}
  warmup: {distribution: q_log_normal, mu: 2.3, sigma: 0.3}
  grad_clip: {distribution: log_uniform, min: -1, max: 1}
  label_smoothing: {distribution: q_normal, mu: 0.1, sigma: 0.01, q: 0.01}
  batch_size: {values: [4, 8], probabilities: [0.3, 0.7]}
base: {preset: tiny, device: cpu, steps: 20, eval_every: 2}
"""
    from app.services.sweeps import parse_sweep_text

    body = parse_sweep_text(text)
    created = make_app().post("/api/sweeps", json=body.model_dump(mode="json", exclude_none=True))
    assert created.status_code == 201, created.text
    stored = created.json()["config"]["parameters"]
    assert stored["warmup"] == {"distribution": "q_log_normal", "mu": 2.3, "sigma": 0.3, "q": 1}
    assert {name: p["distribution"] for name, p in stored.items()} == {
        "lr": "q_log_uniform_values", "dropout": "inv_log_uniform", "weight_decay": "q_beta",
        "warmup": "q_log_normal", "grad_clip": "log_uniform", "label_smoothing": "q_normal",
        "batch_size": "categorical_w_probabilities"}
    for trial in created.json()["trials"]:
        assert math.exp(-4.6) <= trial["params"]["dropout"] <= math.exp(-2.3)
        assert math.exp(-1) <= trial["params"]["grad_clip"] <= math.e


# -- trials repeated over seeds ------------------------------------------------------------------------
def finish(client, run_ids_and_results: dict[int, tuple[str, float | None]], sweep_id: int) -> dict:
    """Runs ended as a worker would end them, the sweep settled; the sweep as the API shows it then."""
    from app.db import session_scope
    from app.models import Run
    from app.services.sweeps import settle_sweep

    settings = client.app.state.settings
    with session_scope(settings) as session:
        for run_id, (status, best) in run_ids_and_results.items():
            run = session.get(Run, run_id)
            run.status, run.best_val_loss = status, best
            session.add(run)
        session.commit()
        settle_sweep(session, sweep_id=sweep_id, settings=settings)
    return client.get(f"/api/sweeps/{sweep_id}").json()


def test_a_trial_over_seeds_is_one_run_a_seed_and_its_objective_their_mean(make_app):
    from app.services import study as studies

    client = make_app()
    created = client.post("/api/sweeps", json=sweep(seeds=3, parallel=1, run_cap=2, base={**BASE, "seed": 7}))
    assert created.status_code == 201, created.text
    first = created.json()["trials"]
    assert [(t["trial"], t["seed"]) for t in first] == [(0, 7), (0, 8), (0, 9)]
    assert [t["name"].rsplit(" [", 1)[1] for t in first] == ["seed 7]", "seed 8]", "seed 9]"]
    runs = [client.get(f"/api/runs/{t['run_id']}").json() for t in first]
    assert len({r["group_id"] for r in runs}) == 1 and runs[0]["group_id"]  # one group: compared with their spread

    sweep_id = created.json()["id"]
    half = finish(client, {first[0]["run_id"]: ("succeeded", 3.9), first[1]["run_id"]: ("succeeded", 4.0)}, sweep_id)
    assert [t["objective"] for t in half["trials"]] == [None, None, None]  # the third seed still running
    assert len(half["trials"]) == 3  # parallel 1: the next trial waits for this one

    done = finish(client, {first[2]["run_id"]: ("succeeded", 4.2)}, sweep_id)
    assert [t["objective"] for t in done["trials"][:3]] == [pytest.approx((3.9 + 4.0 + 4.2) / 3)] * 3
    assert done["best"]["run_id"] == first[0]["run_id"] and done["best"]["objective"] == pytest.approx(4.0333333)
    assert [(t["trial"], t["status"]) for t in done["trials"][3:]] == [(1, "queued")] * 3  # the next trial's seeds
    study = studies.load(client.app.state.settings, sweep_id, done["config"])
    assert study.trials[0].value == pytest.approx(4.0333333) and study.trials[0].state.name == "COMPLETE"


def test_a_trial_with_a_pruned_seed_is_pruned(make_app):
    from app.services import study as studies

    client = make_app()
    created = client.post("/api/sweeps", json=sweep(seeds=2, parallel=1, run_cap=1)).json()
    a, b = (t["run_id"] for t in created["trials"])
    done = finish(client, {a: ("succeeded", 3.9), b: ("pruned", 5.1)}, created["id"])
    assert [t["objective"] for t in done["trials"]] == [None, None] and done["status"] == "finished"
    assert studies.load(client.app.state.settings, created["id"], done["config"]).trials[0].state.name == "PRUNED"


def test_seeds_belong_to_the_sweep_not_its_base(make_app):
    response = make_app().post("/api/sweeps", json=sweep(base={**BASE, "seeds": 3}))
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "base", "seeds"]
    assert response.json()["detail"][0]["msg"] == ("a sweep repeats each trial over seeds with its own key, seeds (at "
                                                  "the top, beside parallel), not base's")
