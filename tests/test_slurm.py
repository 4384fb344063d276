"""The Slurm executor against a real single-node Slurm (tests/slurm.py: Debian's slurm-wlm and munge, started
here as root): runs submitted with sbatch train on the node with `tinygpt train --report-to` and a run-scoped
token, and the dashboard follows their jobs (pending and why, cancel, time limit, requeue). Slow: `make
test-slow` runs them (CI installs Slurm with scripts/install-slurm.sh)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import httpx
import pytest

from .service_helpers import TINY, AppServer, Home, Proc, Service, Worker, create, make_home, wait_for
from .slurm import PARTITION, SlurmCluster, slurm_installed

pytestmark = [pytest.mark.slow, pytest.mark.slurm]
TOKEN = "admin-token-never-on-a-node"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
RUN = {**TINY, "seed": 3, "steps": 24, "eval_every": 8, "log_every": 1, "pool": "slurm"}


@pytest.fixture(scope="module")
def cluster():  # noqa: ANN201
    if not slurm_installed():
        if os.environ.get("CI"):
            pytest.fail("Slurm is not installed (scripts/install-slurm.sh); CI must run these tests")
        pytest.skip("Slurm is not installed (scripts/install-slurm.sh)")
    if os.geteuid() != 0:
        pytest.skip("the test cluster's slurmd runs as root")
    root = Path(tempfile.mkdtemp(prefix="tinygpt-slurm-"))
    started = SlurmCluster(root)
    yield started
    started.stop()


class Executor(Proc):
    """A ``tinygpt slurm-executor``."""

    def __init__(self, home: Home) -> None:
        super().__init__(["slurm-executor"], home, "slurm-executor")


@pytest.fixture(scope="module")
def service(cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory, slice_path: Path, warm_cache: Path):  # noqa: ANN201
    """The app (with its API token), the Slurm executor and a local worker over one home; the jobs' trainers
    use the home's caches (TINYGPT_SLURM_SETUP exports TINYGPT_HOME, as a cluster's shared folder would)."""
    home = make_home(tmp_path_factory.mktemp("slurm"), slice_path, warm_cache, TINYGPT_API_TOKEN=TOKEN,
                     TINYGPT_SLURM="true", TINYGPT_SLURM_PARTITION=PARTITION, TINYGPT_SLURM_POLL_SEC="0.5",
                     SLURM_CONF=cluster.env()["SLURM_CONF"])
    home.extra_env["TINYGPT_SLURM_SETUP"] = json.dumps([f"export TINYGPT_HOME={home.path}"])
    app = AppServer(home)
    home.extra_env["TINYGPT_SLURM_DASHBOARD_URL"] = app.url  # where the nodes reach it (a port of its own here)
    executor = Executor(home)
    service = Service(home, app, [executor, Worker(home, "local-cpu")])
    yield service
    service.stop()


@pytest.fixture
def client(service: Service):  # noqa: ANN201
    with httpx.Client(base_url=service.app.url, headers=AUTH, timeout=30) as c:
        yield c


def submit(client: httpx.Client, **body: object) -> dict:
    return create(client, **{**RUN, **body})


def run_of(client: httpx.Client, run_id: int) -> dict:
    return client.get(f"/api/runs/{run_id}").json()


def ended(client: httpx.Client, run_id: int, timeout: float = 180) -> dict:
    return wait_for(lambda: (r := run_of(client, run_id))["finished_at"] and r, timeout=timeout,
                    message=f"run {run_id} to end")


def losses(client: httpx.Client, run_id: int) -> list[tuple[int, float]]:
    rows = client.get(f"/api/runs/{run_id}/metrics").json()
    return [(row["step"], row["train_loss"]) for row in rows]


def test_runs_train_on_the_cluster_as_they_would_here(client: httpx.Client, cluster: SlurmCluster,
                                                      service: Service) -> None:
    """Three runs submitted to Slurm (two cores: two one-core jobs run, the third waits); each trains and reports
    to its end, and its curve is the local worker's run of the same seed, step for step."""
    seeds = (3, 4, 5)
    slurm_runs = [submit(client, seed=seed) for seed in seeds]
    local_runs = [submit(client, seed=seed, pool="local") for seed in seeds]
    for run, local in zip(slurm_runs, local_runs, strict=True):
        done = ended(client, run["id"])
        assert done["status"] == "succeeded", done["error"]
        wait_for(lambda run=run: run_of(client, run["id"])["slurm_job"]["state"] == "COMPLETED", timeout=60,
                 message="its job's end, as squeue tells it")
        assert done["has_checkpoint"] and done["last_step"] == 24 and done["best_val_loss"] is not None
        assert ended(client, local["id"])["status"] == "succeeded"
        curve = losses(client, run["id"])
        assert curve == losses(client, local["id"]) and [step for step, _ in curve] == list(range(25))
    assert losses(client, slurm_runs[0]["id"]) != losses(client, slurm_runs[1]["id"])  # another seed, another curve
    shown = client.get(f"/runs/{slurm_runs[0]['id']}").text
    assert "#SBATCH --partition=debug" in shown and "--report-run" in shown and TOKEN not in shown


def test_a_job_never_sees_the_dashboards_token(client: httpx.Client, service: Service) -> None:
    run = ended(client, submit(client, steps=2, eval_every=2)["id"])
    folder = service.home.path / "runs" / str(run["id"])
    script = (folder / "slurm-job.sh").read_text()
    assert "TINYGPT_API_TOKEN" in script and TOKEN not in script  # named in a comment, never written
    out = (folder / f"slurm-{run['slurm_job']['id']}.out").read_text()
    assert TOKEN not in out


def test_a_pending_run_says_why_it_waits_and_a_cancel_ends_it(client: httpx.Client, cluster: SlurmCluster) -> None:
    blocker = cluster.command("sbatch", "--parsable", "-c", "2", "-o", "/dev/null", "--wrap", "sleep 300")
    try:
        wait_for(lambda: cluster.job_field(blocker, "JobState") == "RUNNING", timeout=60, message="the blocker to run")
        run = submit(client)
        waiting = wait_for(lambda: (r := run_of(client, run["id"]))["slurm_job"]["reason"] and r, timeout=60,
                           message="the pending job's reason")
        assert waiting["status"] == "queued"
        assert (waiting["slurm_job"]["state"], waiting["slurm_job"]["reason"]) == ("PENDING", "Resources")
        page = client.get(f"/runs/{run['id']}").text
        assert "PENDING (Resources)" in page
        listed = client.get("/partials/runs").text
        assert "PENDING (Resources)" in listed
        assert client.post(f"/api/runs/{run['id']}/cancel").status_code == 200
        done = ended(client, run["id"], timeout=60)
        assert done["status"] == "cancelled"
        job = done["slurm_job"]["id"]
        wait_for(lambda: cluster.job_field(job, "JobState") == "CANCELLED", timeout=60, message="scancel")
    finally:
        cluster.command("scancel", blocker)


def wait_running_at(client: httpx.Client, run_id: int, step: int, timeout: float = 120) -> dict:
    return wait_for(lambda: (r := run_of(client, run_id))["status"] == "running" and r["last_step"] >= step and r,
                    timeout=timeout, message=f"run {run_id} to reach step {step}")


def test_cancel_while_running_stops_the_job(client: httpx.Client, cluster: SlurmCluster) -> None:
    run = submit(client, steps=100_000, eval_every=20)
    wait_running_at(client, run["id"], 5)
    assert client.post(f"/api/runs/{run['id']}/cancel").status_code == 200
    done = ended(client, run["id"], timeout=90)
    assert done["status"] == "cancelled"
    wait_for(lambda: cluster.job_field(done["slurm_job"]["id"], "JobState") in ("CANCELLED", "COMPLETED"),
             timeout=60, message="the job to end")


def test_a_time_limit_ends_the_run_with_its_reason_and_last_checkpoint(client: httpx.Client,
                                                                     service: Service) -> None:
    run = submit(client, steps=100_000, eval_every=20, time_limit="1")
    done = ended(client, run["id"], timeout=240)
    assert done["status"] == "failed"
    assert done["slurm_job"]["state"] == "TIMEOUT"
    assert done["error"].startswith("time limit 1 reached at step ") and done["error"].endswith("; last.pt kept")
    assert (service.home.path / "runs" / str(run["id"]) / "last.pt").exists()


def test_a_requeued_job_resumes_from_its_checkpoint_with_every_step_once(client: httpx.Client,
                                                                        cluster: SlurmCluster) -> None:
    run = submit(client, steps=240, eval_every=20)
    wait_running_at(client, run["id"], 45)
    job = run_of(client, run["id"])["slurm_job"]["id"]
    cluster.command("scontrol", "requeue", job)
    waiting = wait_for(lambda: (r := run_of(client, run["id"]))["status"] == "queued" and r, timeout=60,
                       message="the run to wait again")
    assert waiting["slurm_job"]["shown"] == "PENDING (BeginTime)"  # Slurm holds a requeued job two minutes:
    cluster.command("scontrol", "update", f"JobId={job}", "StartTime=now")  # let it start now, as an admin may
    done = ended(client, run["id"], timeout=300)
    assert done["status"] == "succeeded", done["error"]
    steps = [step for step, _ in losses(client, run["id"])]
    assert steps == list(range(241))
    events = client.get(f"/api/runs/{run['id']}/events").text
    assert "requeued by Slurm" in events and "resumed at step " in events


def test_a_sweep_over_the_cluster_prunes_a_hopeless_trial(client: httpx.Client, cluster: SlurmCluster) -> None:
    """A sweep whose base runs on Slurm: its trials are jobs, their evaluations reach the study through the
    report channel, and the trial that cannot learn (lr 1e-7) is pruned before its last step."""
    base = {**RUN, "steps": 120, "eval_every": 10, "log_every": 10}
    response = client.post("/api/sweeps", json={
        "base": base, "method": "grid", "parameters": {"lr": {"values": [0.01, 0.008, 1e-7]}}, "parallel": 1,
        "early_terminate": {"type": "median", "min_iter": 1}, "seed": 3})
    assert response.status_code == 201, response.text
    sweep_id = response.json()["id"]
    detail = wait_for(lambda: (d := client.get(f"/api/sweeps/{sweep_id}").json())["status"] != "running" and d,
                      timeout=300, message="the sweep to end")
    assert [t["status"] for t in detail["trials"]].count("succeeded") == 2
    hopeless = next(t for t in detail["trials"] if t["params"]["lr"] == 1e-7)
    assert hopeless["status"] == "pruned" and hopeless["last_step"] < 120
    trial_run = run_of(client, hopeless["run_id"])
    assert trial_run["pool"] == "slurm" and trial_run["slurm_job"]["id"] and trial_run["error"] is None
    assert detail["best"]["params"]["lr"] in (0.01, 0.008)
