"""A W&B sweep configuration as a W&B user writes it (in-process): hyperband given as max_iter and s gets W&B's
lowest band as its min_iter, integer bounds stay integers, and keys only W&B has are refused saying what they are
for there, never dropped in silence."""

from __future__ import annotations

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
    from app.db import session_scope
    from app.models import Run, RunStatus
    from app.services.sweeps import settle_sweep

    client = make_app()
    config = sweep(metric={"name": "val_loss", "goal": "minimize", "target": target}, run_cap=5, parallel=1)
    created = client.post("/api/sweeps", json=config).json()
    assert created["config"]["metric"]["target"] == target
    settings = client.app.state.settings
    with session_scope(settings) as session:  # its first trial succeeded with 3.9 (the worker's part)
        run = session.get(Run, created["trials"][0]["run_id"])
        run.status, run.best_val_loss = RunStatus.succeeded, 3.9
        session.add(run)
        session.commit()
        settle_sweep(session, sweep_id=created["id"], settings=settings)
    after = client.get(f"/api/sweeps/{created['id']}").json()
    assert (len(after["trials"]), after["status"]) == (trials, status)
