"""The slurm pool without a cluster: where a submission may go (422 naming `pool` and `time_limit`), the batch
script a run gets (its #SBATCH lines, its options, never a token), the run-scoped token's access rules, how
Slurm's job states end a run, the run page's job line, and `tinygpt train`'s SIGTERM. The real cluster:
tests/test_slurm.py (slow)."""

from __future__ import annotations

import json
import shlex
import signal
import sys
import time
from pathlib import Path

import pytest
from sqlmodel import select

from app.db import init_db, session_scope
from app.models import Pool, Run, RunCreate, RunStatus
from app.services.lifecycle import add_runs
from app.services.run_tokens import new_run_token
from app.settings import Settings, SettingsError, get_settings
from tinygpt.run_config import OPTIONS, TrainConfig
from worker.job import train_config
from worker.queue import claim_next
from worker.slurm.batch_script import batch_script, train_command
from worker.slurm.job_states import run_end
from worker.slurm.scheduler import JobInfo

from .service_helpers import TINY, start_tinygpt

TOKEN = "the-admin-token-0123456789"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
SLURM_RUN = {**TINY, "steps": 20, "pool": "slurm"}


# -- where a run may go -------------------------------------------------------------------------------
@pytest.mark.parametrize("settings, body, field, message", [
    ({}, {"pool": "slurm"}, "pool",
     "pool slurm is not set up on this dashboard (pools: local; TINYGPT_SLURM turns the slurm pool on)"),
    ({"slurm": True}, {"pool": "local", "time_limit": "10"}, "time_limit",
     "time_limit applies to the slurm pool only (this run goes to the local workers)"),
    ({"slurm": True}, {"pool": "slurm", "time_limit": "ten minutes"}, "time_limit",
     "Value error, time_limit must be minutes or [days-]HH:MM:SS as sbatch --time takes it, got 'ten minutes'"),
    ({"slurm": True}, {"pool": "cloud"}, "pool", "Input should be 'local' or 'slurm'"),
])
def test_a_run_goes_only_to_a_pool_that_is_set_up(make_app, settings, body, field, message):
    client = make_app(**settings)
    response = client.post("/api/runs", json={**TINY, **body})
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert [(d["loc"][-1], d["msg"]) for d in detail] == [(field, message)]


def test_the_slurm_pool_takes_runs_for_devices_this_machine_lacks(make_app):
    """A Slurm run's devices are the cluster's: no check against this machine (which has no GPU)."""
    client = make_app(slurm=True, default_pool="slurm")
    response = client.post("/api/runs", json={**TINY, "device": "cuda", "gpus": 2, "time_limit": "00:30:00"})
    assert response.status_code == 201, response.text
    run = response.json()[0]
    assert run["pool"] == "slurm" and run["requested_device"] == "cuda"
    assert run["slurm_job"] == {"id": None, "state": None, "reason": None, "shown": None,
                                "time_limit": "00:30:00", "script": None}
    assert "pool" not in run["config"] and "time_limit" not in run["config"]
    local = make_app().post("/api/runs", json={**TINY, "device": "cuda"})
    assert local.status_code == 422  # the local pool: this machine's devices only


def test_default_pool_slurm_needs_the_slurm_pool(monkeypatch):
    monkeypatch.setenv("TINYGPT_DEFAULT_POOL", "slurm")
    get_settings.cache_clear()
    with pytest.raises(SettingsError, match="^TINYGPT_DEFAULT_POOL=slurm needs TINYGPT_SLURM=true$"):
        get_settings()
    get_settings.cache_clear()


def test_local_workers_leave_slurm_runs_alone(tmp_path, slice_path):
    settings = Settings(home=tmp_path, holmes_path=slice_path, slurm=True)
    init_db(settings)
    with session_scope(settings) as s:
        add_runs(s, body=RunCreate.model_validate(SLURM_RUN), settings=settings)
        s.commit()
        assert claim_next(s, worker="w", host="h", slot="cpu") is None
        add_runs(s, body=RunCreate.model_validate({**SLURM_RUN, "pool": "local"}), settings=settings)
        s.commit()
        assert claim_next(s, worker="w", host="h", slot="cpu").pool == Pool.local


# -- the batch script --------------------------------------------------------------------------------------
def slurm_run(tmp_path: Path, slice_path: Path, settings: Settings, **body: object) -> Run:
    init_db(settings)
    with session_scope(settings) as s:
        run = add_runs(s, body=RunCreate.model_validate({**SLURM_RUN, **body}), settings=settings)[0]
        s.commit()
        s.refresh(run)
        s.expunge(run)
    return run


def test_the_script_trains_the_runs_own_options_and_reports_back(tmp_path, slice_path):
    settings = Settings(home=tmp_path, holmes_path=slice_path, slurm=True, slurm_partition="gpu-short",
                        slurm_account="lab42", slurm_qos="normal", slurm_sbatch_lines=["--mem=8G"],
                        slurm_setup=["module load cuda/12.4"], slurm_dashboard_url="http://login-node:8000")
    run = slurm_run(tmp_path, slice_path, settings, lr=0.002, time_limit="00:10:00")
    script = batch_script(run, corpus=slice_path, settings=settings)
    lines = script.splitlines()
    assert [line for line in lines if line.startswith("#SBATCH")] == [
        f"#SBATCH --job-name=tinygpt-run-{run.id}", f"#SBATCH --output={run.out_dir}/slurm-%j.out",
        "#SBATCH --time=00:10:00", "#SBATCH --requeue", "#SBATCH --ntasks=1", "#SBATCH --cpus-per-task=1",
        "#SBATCH --partition=gpu-short", "#SBATCH --account=lab42", "#SBATCH --qos=normal", "#SBATCH --mem=8G"]
    assert "module load cuda/12.4" in lines and "if [ -f last.pt ]; then set -- --resume; fi" in lines
    command = shlex.split(lines[-1])
    assert command[:5] == ["exec", sys.executable, "-m", "tinygpt", "train"] and command[-1] == "$@"
    flags = {flag: value for flag, value in zip(command[5:], command[6:], strict=False)
             if flag.startswith("--") and not value.startswith("--")}
    assert flags["--report-to"] == "http://login-node:8000" and flags["--report-run"] == str(run.id)
    assert flags["--corpus"] == str(slice_path) and flags["--out"] == run.out_dir and flags["--device"] == "cpu"
    assert "--scheduled" in command and TOKEN not in script
    # the options it trains are the run's, what a local worker's job would train (those that change nothing in
    # this run, such as muon_lr with adamw, are left out: given, the command would warn of each)
    options = json.loads(flags["--config"])
    assert "muon_lr" not in options and options["lr"] == 0.002
    run.device = "cpu"  # the slot a local worker would have claimed it on
    on_the_node = TrainConfig.from_dict({**options, "corpus": str(slice_path), "device": "cpu"}).to_dict()
    here = train_config(run, slice_path).to_dict()
    assert {k: v for k, v in on_the_node.items() if k not in OPTIONS or OPTIONS[k].applies(here)} == \
        {k: v for k, v in here.items() if k not in OPTIONS or OPTIONS[k].applies(here)}


def test_gpus_become_gres_and_one_torchrun(tmp_path, slice_path):
    settings = Settings(home=tmp_path, holmes_path=slice_path, slurm=True, slurm_gres="gpu:h100",
                        slurm_cpus_per_task=4, slurm_python="apptainer exec --nv tinygpt.sif python")
    run = slurm_run(tmp_path, slice_path, settings, device="cuda", gpus=2, batch_size=8)
    script = batch_script(run, corpus=slice_path, settings=settings)
    assert "#SBATCH --gres=gpu:h100:2" in script and "#SBATCH --cpus-per-task=4" in script
    command = train_command(run, corpus=slice_path, settings=settings)
    assert command[:10] == ["apptainer", "exec", "--nv", "tinygpt.sif", "python", "-m", "torch.distributed.run",
                            "--standalone", "--nproc_per_node=2", "-m"]
    assert command[command.index("--device") + 1] == "cuda"


def test_without_gres_a_runs_processes_get_a_core_each(tmp_path, slice_path):
    settings = Settings(home=tmp_path, holmes_path=slice_path, slurm=True, slurm_time_limit="45")
    run = slurm_run(tmp_path, slice_path, settings, gpus=2)
    script = batch_script(run, corpus=slice_path, settings=settings)
    assert "#SBATCH --cpus-per-task=2" in script and "#SBATCH --time=45" in script and "--gres" not in script


# -- the run-scoped token ------------------------------------------------------------------------------------
@pytest.fixture
def guarded_slurm(make_app):
    client = make_app(api_token=TOKEN, slurm=True)
    ids = [client.post("/api/runs", json=SLURM_RUN, headers=ADMIN).json()[0]["id"] for _ in range(2)]
    settings = client.app.state.settings
    with session_scope(settings) as s:
        run = s.get(Run, ids[0])
        token = new_run_token(run)
        s.add(run)
        s.commit()
    return client, ids, {"Authorization": f"Bearer {token}"}


def test_a_run_token_reports_for_its_own_run(guarded_slurm):
    client, (own, _), auth = guarded_slurm
    response = client.post(f"/api/runs/{own}/report", headers=auth, json={"items": [
        {"seq": 1, "kind": "start", "data": {"device": "cpu", "precision": "fp32", "params": 1000}}]})
    assert response.status_code == 200, response.text
    assert response.json() == {"applied_seq": 1, "cancel_requested": False, "status": "running"}
    assert client.get(f"/api/runs/{own}", headers=ADMIN).json()["status"] == "running"


@pytest.mark.parametrize("method, path", [
    ("POST", "/api/runs/{other}/report"), ("PUT", "/api/runs/{other}/checkpoint"), ("GET", "/api/runs/{own}"),
    ("GET", "/api/runs"), ("POST", "/api/runs/{own}/cancel"), ("GET", "/api/runs/{own}/checkpoint"),
    ("GET", "/runs/{own}"),
])
def test_a_run_token_can_do_nothing_else(guarded_slurm, method, path):
    client, (own, other), auth = guarded_slurm
    response = client.request(method, path.format(own=own, other=other), headers=auth, json={"items": []})
    assert response.status_code == 403
    assert f"token reports for run {own} only (POST /api/runs/{own}/report" in response.text


def test_a_run_token_ends_with_its_run_and_a_wrong_one_is_refused(guarded_slurm):
    client, (own, _), auth = guarded_slurm
    wrong = {"Authorization": f"Bearer tgr-{own}-{'x' * 43}"}
    assert client.post(f"/api/runs/{own}/report", headers=wrong, json={"items": []}).status_code == 401
    start = {"seq": 1, "kind": "start", "data": {"device": "cpu", "precision": "fp32", "params": 1000}}
    end = {"seq": 2, "kind": "status", "data": {"status": "succeeded"}}
    assert client.post(f"/api/runs/{own}/report", headers=auth, json={"items": [start, end]}).status_code == 200
    response = client.post(f"/api/runs/{own}/report", headers=auth, json={"items": []})
    assert response.status_code == 401
    assert response.json()["detail"] == f"run {own}'s token is not valid: it was replaced, or the run has finished"


def test_a_local_run_takes_no_reports(make_app):
    client = make_app(slurm=True)
    run = client.post("/api/runs", json={**TINY, "pool": "local"}).json()[0]
    response = client.post(f"/api/runs/{run['id']}/report", json={"items": []})
    assert response.status_code == 409


# -- Slurm's word on a job's end -----------------------------------------------------------------------------
@pytest.mark.parametrize("state, cancel, prune, status, error", [
    ("TIMEOUT", False, False, RunStatus.failed, "time limit 00:10:00 reached at step 740; last.pt kept"),
    ("CANCELLED", True, False, RunStatus.cancelled, "cancelled from the dashboard at step 740; last.pt kept"),
    ("CANCELLED", False, False, RunStatus.cancelled,
     "Slurm job 7 was cancelled outside the dashboard at step 740; last.pt kept"),
    ("CANCELLED", True, True, RunStatus.pruned, None),
    ("OUT_OF_MEMORY", False, False, RunStatus.failed,
     "Slurm job 7 ran out of memory (exit code 0:9) at step 740; last.pt kept"),
    ("NODE_FAIL", False, False, RunStatus.failed,
     "Slurm job 7 lost its node (NODE_FAIL) (exit code 0:9) at step 740; last.pt kept"),
    ("COMPLETED", False, False, RunStatus.failed,
     "Slurm job 7 ended at step 740 without its trainer reporting how (slurm-7.out in the run folder says why)"),
    ("GONE", False, False, RunStatus.failed, "Slurm job 7 is no longer known to Slurm (exit code 0:9) at step 740; "
                                             "last.pt kept"),
])
def test_a_job_that_ended_without_its_trainer_ends_its_run(state, cancel, prune, status, error):
    end = run_end(JobInfo("7", state, None, "0:9"), time_limit="00:10:00", step=740, has_last=True,
                  cancel_requested=cancel, prune_requested=prune)
    assert (end.status, end.error) == (status, error)


def test_no_checkpoint_yet_is_said(tmp_path):
    end = run_end(JobInfo("7", "TIMEOUT", None), time_limit="5", step=0, has_last=False, cancel_requested=False)
    assert end.error == "time limit 5 reached at step 0; no last.pt yet"


# -- pages ------------------------------------------------------------------------------------------------------
def test_the_form_offers_the_pools_only_when_slurm_is_on(make_app):
    assert 'name="pool"' not in make_app().get("/new").text
    page = make_app(slurm=True, slurm_time_limit="02:00:00").get("/new").text
    assert '<option value="slurm" >the Slurm cluster (sbatch)</option>' in page
    assert 'name="time_limit" id="time_limit" value="" placeholder="02:00:00"' in page


def test_the_form_sends_a_run_to_slurm_or_names_what_is_wrong(make_app):
    client = make_app(slurm=True)
    form = {"preset": "tiny", "device": "cpu", "precision": "fp32", "batch_size": "4", "steps": "20"}
    bad = client.post("/new", data={**form, "pool": "local", "time_limit": "10"})
    assert bad.status_code == 422 and "time_limit applies to the slurm pool only" in bad.text
    good = client.post("/new", data={**form, "pool": "slurm", "time_limit": "10"})
    assert good.status_code == 200, good.text
    run = client.get("/api/runs").json()["items"][0]
    assert (run["pool"], run["slurm_job"]["time_limit"]) == ("slurm", "10")


def test_the_run_page_shows_the_job_and_its_script(make_app):
    client = make_app(slurm=True)
    run_id = client.post("/api/runs", json=SLURM_RUN).json()[0]["id"]
    page = client.get(f"/runs/{run_id}").text
    assert "waiting to be submitted by the Slurm executor" in page and "time limit 01:00:00" in page
    settings = client.app.state.settings
    with session_scope(settings) as s:
        run = s.get(Run, run_id)
        run.slurm_job_id, run.slurm_state, run.slurm_reason, run.job_script = "42", "PENDING", "Priority", "#!/bin/bash"
        s.add(run)
        s.commit()
    partial = client.get(f"/partials/runs/{run_id}/slurm").text
    assert '<code id="slurm-job-id">42</code>: <strong id="slurm-state">PENDING (Priority)</strong>' in partial
    assert 'hx-trigger="every 3s"' in partial and "<pre class=\"script\" tabindex=\"0\">#!/bin/bash</pre>" in partial
    listed = client.get("/partials/runs").text
    assert "Slurm PENDING (Priority)" in listed and '<span class="muted">job 42</span>' in listed
    local = client.post("/api/runs", json={**TINY, "pool": "local"}).json()[0]["id"]
    assert client.get(f"/partials/runs/{local}/slurm").status_code == 404
    with session_scope(settings) as s:
        assert s.exec(select(Run.pool).where(Run.id == local)).one() == "local"


# -- tinygpt train and SIGTERM ---------------------------------------------------------------------------------
def test_sigterm_stops_training_at_a_step_with_last_pt(tmp_path, slice_path):
    """What a Slurm time limit, preemption or scancel sends: the run stops at a step with its resume point."""
    out = tmp_path / "run"
    proc = start_tinygpt("train", "--preset", "tiny", "--steps", "100000", "--eval-every", "20", "--batch-size",
                         "4", "--threads", "1", "--device", "cpu", "--corpus", slice_path, "--out", out,
                         "--no-progress", module="tinygpt")
    deadline = time.monotonic() + 120
    while not (out / "metrics.csv").exists() or len((out / "metrics.csv").read_text().splitlines()) < 3:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "tinygpt train: stopped by SIGTERM at step " in err and f"; last.pt saved in {out}" in err
    assert (out / "last.pt").exists()
