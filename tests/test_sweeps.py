"""Sweeps end to end: the real app and two real workers, on SQLite and on PostgreSQL; the study on Optuna.

Trials are ordinary runs of the tiny preset (a few seconds each on 2 cores).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .service_helpers import (
    AppServer,
    Worker,
    crash_worker,
    make_home,
    read_events,
    tinygpt_here,
    wait_for,
)

BASE = {"preset": "tiny", "device": "cpu", "precision": "fp32", "batch_size": 4, "threads": 1, "seed": 5,
        "steps": 10, "eval_every": 5, "eval_batches": 2, "sample_tokens": 8}


@pytest.fixture(scope="module")
def service(tmp_path_factory, slice_path, warm_cache, database_slow_pg):
    """One app and two workers (warm job processes on), on SQLite and (slow) on PostgreSQL."""
    home = make_home(tmp_path_factory.mktemp("sweeps"), slice_path, warm_cache, TINYGPT_WARM_JOBS="true",
                     **database_slow_pg)
    app = AppServer(home)
    workers = [Worker(home, "w1"), Worker(home, "w2")]
    yield home, app
    for w in workers:
        w.stop()
    app.stop()


def create_sweep(client, **config) -> dict:
    response = client.post("/api/sweeps", json={"base": BASE, **config})
    assert response.status_code == 201, response.text
    return response.json()


def files_of(detail: dict, home) -> dict[int, set[str]]:
    return {t["trial"]: {p.name for p in (home.path / "runs" / str(t["run_id"])).iterdir() if p.is_file()}
            for t in detail["trials"]}


def test_a_grid_sweep_runs_every_point_once_on_two_workers(service):
    home, app = service
    with app.client() as c:
        sweep = create_sweep(c, method="grid", parameters={"lr": {"values": [0.003, 0.01]},
                                                              "dropout": {"values": [0.0, 0.1]}}, parallel=2,
                             keep_checkpoints=3, name="grid")
        assert sweep["status"] == "running" and sweep["trials_planned"] == 4
        assert [t["status"] for t in sweep["trials"]] == ["queued", "queued"]  # parallel: 2 at a time
        events = read_events(f"{app.url}/api/sweeps/{sweep['id']}/events", timeout=300)
        detail = c.get(f"/api/sweeps/{sweep['id']}").json()
    assert detail["status"] == "finished" and detail["counts"] == {"succeeded": 4}
    points = sorted((t["params"]["lr"], t["params"]["dropout"]) for t in detail["trials"])
    assert points == [(0.003, 0.0), (0.003, 0.1), (0.01, 0.0), (0.01, 0.1)]
    assert sorted(t["trial"] for t in detail["trials"]) == [0, 1, 2, 3]
    best = min(detail["trials"], key=lambda t: t["best_val_loss"])
    assert detail["best"]["run_id"] == best["run_id"] and detail["best"]["objective"] == best["best_val_loss"]
    assert set(detail["importance"]) == {"lr", "dropout"} and abs(sum(detail["importance"].values()) - 1) < 1e-3
    kinds = [e["data"]["kind"] for e in events if e["event"] == "trial"]
    assert kinds.count("created") == 4 and kinds.count("finished") == 4 and kinds.count("evaluated") == 8
    assert events[-2]["event"] == "sweep" and events[-2]["data"]["status"] == "finished"
    assert events[-1]["event"] == "end"
    told = events[-3]["data"]  # the sweep_finished alert (webhooks, when set), just before its end
    assert events[-3]["event"] == "alert" and told["kind"] == "sweep_finished"
    assert told["message"] == (f"4 trials: 4 succeeded; best val {best['best_val_loss']:.4f} (trial {best['trial']}, "
                               f"run {best['run_id']})")
    # the files left: an ended run keeps best.pt (weights only), never last.pt; the top 3 keep theirs
    files = files_of(detail, home)
    ranked = sorted(detail["trials"], key=lambda t: t["best_val_loss"])
    assert all("last.pt" not in names for names in files.values())
    assert [("best.pt" in files[t["trial"]]) for t in ranked] == [True, True, True, False]
    assert [t["has_checkpoint"] for t in ranked] == [True, True, True, False]
    for t in detail["trials"]:
        folder = home.path / "runs" / str(t["run_id"])
        assert t["disk_bytes"] == sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    assert detail["disk_bytes"] == sum(t["disk_bytes"] for t in detail["trials"])
    from tinygpt.checkpoint import read_checkpoint

    kept = read_checkpoint(Path(home.path / "runs" / str(ranked[0]["run_id"]) / "best.pt"))
    assert kept["optimizer"] is None and kept["model"]  # weights for sampling; 1/3 of the size


def test_a_hopeless_trial_is_pruned_before_its_last_step(service):
    """Median pruning: trials with a learning rate that learns, and one (lr 1e-7) that cannot."""
    home, app = service
    with app.client() as c:
        sweep = create_sweep(c, method="grid", parameters={"lr": {"values": [0.01, 0.008, 1e-7]}}, parallel=1,
                             early_terminate={"type": "median", "min_iter": 1}, seed=3)
        read_events(f"{app.url}/api/sweeps/{sweep['id']}/events", timeout=300)
        detail = c.get(f"/api/sweeps/{sweep['id']}").json()
    hopeless = next(t for t in detail["trials"] if t["params"]["lr"] == 1e-7)
    assert hopeless["status"] == "pruned" and hopeless["last_step"] < BASE["steps"]
    assert hopeless["objective"] is None and hopeless["best_val_loss"] is not None  # metrics kept
    assert detail["best"]["params"]["lr"] in (0.01, 0.008)
    files = files_of(detail, home)[hopeless["trial"]]
    assert "last.pt" not in files and "metrics.csv" in files


@pytest.mark.parametrize("config, field, message", [
    ({"parameters": {"learning_rate": {"values": [0.1]}}}, ["parameters", "learning_rate"],
     "'learning_rate' is not a run option (did you mean 'lr'? GET /api/options lists them)"),
    ({"parameters": {"lr": {"min": 1e-4, "max": 5.0}}, "method": "random", "run_cap": 2}, ["parameters", "lr"],
     "max 5.0: lr must be in (0, 1], got 5.0"),
    ({"parameters": {"dropout": {"values": [0.1, 1.5]}}}, ["parameters", "dropout"],
     "value 1.5: dropout must be in [0, 1), got 1.5"),
    ({"method": "hyperopt"}, ["method"], "Value error, method must be one of grid, random, bayes"),
    ({"method": "random"}, ["run_cap"], "run_cap is required for a random sweep (it would never end)"),
    ({"parameters": {"lr": {"min": 1e-4, "max": 1e-2}}}, ["parameters", "lr"],
     "a grid sweep takes values, int_uniform or q_uniform (as W&B's grid does), not uniform"),
    ({"parameters": {"batch_size": {"min": 4, "max": 8.5}}, "method": "random", "run_cap": 2},
     ["parameters", "batch_size"], "batch_size takes whole numbers: use int_uniform, values, or a q_ distribution "
                                  "with a whole q"),
    ({"base": {**BASE, "steps": 0}}, ["base", "steps"], "steps must be in [1, 10000000], got 0"),
    ({"early_terminate": {"type": "bohb"}}, ["early_terminate", "type"],
     "Value error, early_terminate type must be one of hyperband, median"),
    ({"early_terminate": {"type": "hyperband", "min_iter": 9}}, ["early_terminate", "min_iter"],
     "min_iter 9 is more than a trial's 2 evaluation(s) (steps / eval_every)"),
])
def test_bad_sweep_configs_are_refused_naming_what_is_wrong(service, config, field, message):
    _, app = service
    with app.client() as c:
        response = c.post("/api/sweeps", json={"method": "grid", "base": BASE,
                                               "parameters": {"lr": {"values": [0.01]}}, **config})
        assert response.status_code == 422, response.text
        [error] = [e for e in response.json()["detail"] if e["loc"][1:] == field] or response.json()["detail"]
        assert error["loc"][1:] == field and error["msg"] == message, response.json()


def test_cancel_stops_every_trial(service):
    _, app = service
    with app.client() as c:
        sweep = create_sweep(c, method="random", run_cap=6, parallel=3, parameters={"lr": {
            "min": 1e-3, "max": 1e-2, "distribution": "log_uniform_values"}}, base={**BASE, "steps": 400})
        wait_for(lambda: any(t["status"] == "running" for t in c.get(f"/api/sweeps/{sweep['id']}").json()["trials"]),
                 timeout=60, message="a trial running")
        cancelled = c.post(f"/api/sweeps/{sweep['id']}/cancel").json()
        assert cancelled["status"] == "cancelled"
        wait_for(lambda: all(t["status"] == "cancelled" for t in c.get(f"/api/sweeps/{sweep['id']}").json()["trials"]),
                 timeout=60, message="every trial cancelled")
        detail = c.get(f"/api/sweeps/{sweep['id']}").json()
        assert len(detail["trials"]) == 3 and detail["counts"] == {"cancelled": 3}  # no trial after the cancel
        assert c.post(f"/api/sweeps/{sweep['id']}/cancel").status_code == 409
        # deleting it frees its trials' files
        folders = [Path(app.home.path / "runs" / str(t["run_id"])) for t in detail["trials"]]
        assert c.delete(f"/api/sweeps/{sweep['id']}").status_code == 204
        assert not any(f.exists() for f in folders)
        assert c.get(f"/api/sweeps/{sweep['id']}").status_code == 404
        assert all(c.get(f"/api/runs/{t['run_id']}").status_code == 404 for t in detail["trials"])


SWEEP_YAML = """\
method: random
metric: {name: val_loss, goal: minimize}
parameters:
  lr: {min: 0.001, max: 0.01, distribution: log_uniform_values}
  dropout: {values: [0.0, 0.1]}
  batch_size: {value: 4}
run_cap: 2
parallel: 1
name: from the command line
base: {preset: tiny, device: cpu, precision: fp32, threads: 1, steps: 10, eval_every: 5, eval_batches: 2}
"""


def test_tinygpt_sweep_submits_a_wandb_yaml_to_a_dashboard(service, tmp_path):
    home, app = service
    config = tmp_path / "sweep.yaml"
    config.write_text(SWEEP_YAML)
    done = tinygpt_here("sweep", "--config", config, "--url", app.url, env=home.env())
    assert done.returncode == 0, done.stderr
    sweep_id = int(done.stdout.split()[1])
    assert done.stdout == f"sweep {sweep_id} (from the command line): 2 trials planned; {app.url}/sweeps/{sweep_id}\n"
    with app.client() as c:
        read_events(f"{app.url}/api/sweeps/{sweep_id}/events", timeout=300)
        detail = c.get(f"/api/sweeps/{sweep_id}").json()
    assert detail["counts"] == {"succeeded": 2}
    assert all(0.001 <= t["params"]["lr"] <= 0.01 and t["params"]["batch_size"] == 4 for t in detail["trials"])


@pytest.mark.parametrize("text, message", [
    (SWEEP_YAML.replace("dropout:", "drop_out:"), "parameters.drop_out: 'drop_out' is not a run option"),
    (SWEEP_YAML.replace("method: random", "method: hyperopt"), "method: method must be one of grid, random, bayes"),
    ("method: [grid\n", "config: not valid YAML (line 2)"),
    # aliases expand later (each level of nesting ten times more): refused before anything expands them
    ("a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n",
     "config: not valid YAML (line 2): aliases (*name) are not accepted: write the value out"),
])
def test_tinygpt_sweep_refuses_a_bad_config_in_one_line(service, tmp_path, text, message):
    home, _ = service
    config = tmp_path / "sweep.yaml"
    config.write_text(text)
    done = tinygpt_here("sweep", "--config", config, env=home.env())  # the local home: checked before anything is stored
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"tinygpt sweep: error: {message}") and done.stderr.count("\n") == 1, done.stderr


@pytest.mark.slow  # a minute: a trial's worker killed, the trial resumed
def test_a_worker_killed_mid_trial_leaves_one_result_for_it(tmp_path, slice_path, warm_cache, database_faults):

    from app.services import study as studies
    from app.settings import Settings

    home = make_home(tmp_path, slice_path, warm_cache, **database_faults)
    app, worker = AppServer(home), Worker(home, "killed")
    try:
        with app.client() as c:
            sweep = create_sweep(c, method="grid", parameters={"lr": {"values": [0.01]}},
                                 base={**BASE, "steps": 60, "eval_every": 10})
            run_id = sweep["trials"][0]["run_id"]
            wait_for(lambda: (home.path / "runs" / str(run_id) / "last.pt").exists(), timeout=120, message="step 10")
            wait_for(lambda: c.get(f"/api/runs/{run_id}").json()["last_step"] >= 25, timeout=120, message="step 25")
            crash_worker(worker, home, run_id)  # the machine dies: worker and job at once
            worker = Worker(home, "killed")  # its runs: crashed, re-queued, resumed from step 20
            events = read_events(f"{app.url}/api/sweeps/{sweep['id']}/events", timeout=300)
            detail = c.get(f"/api/sweeps/{sweep['id']}").json()
            run = c.get(f"/api/runs/{run_id}").json()
    finally:
        worker.stop()
        app.stop()
    assert run["attempt"] == 2 and run["status"] == "succeeded"
    assert detail["status"] == "finished" and detail["counts"] == {"succeeded": 1}
    finished = [e["data"] for e in events if e["event"] == "trial" and e["data"]["kind"] == "finished"]
    assert len(finished) == 1 and finished[0]["objective"] == run["best_val_loss"]
    settings = Settings(home=home.path, database_url=home.extra_env.get("TINYGPT_DATABASE_URL"))
    study = studies.load(settings, sweep["id"], {**sweep["config"]})
    [trial] = study.get_trials()
    assert trial.state.name == "COMPLETE" and trial.value == run["best_val_loss"]
    assert sorted(trial.intermediate_values) == [1, 2, 3, 4, 5, 6]  # each evaluation once, resumed or not
