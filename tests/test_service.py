"""End to end: the real app (uvicorn) and real workers as processes, on a temporary home and database."""

from __future__ import annotations

import io
import json
import signal
import socket
import time

import pytest
import torch

from tinygpt import __version__

from .service_helpers import (
    TINY,
    AppServer,
    Worker,
    create,
    engine_independent,
    make_home,
    read_events,
    run_status,
    wait_for,
)


@pytest.fixture(scope="module")
def shared(start_service, database):
    """One app and one worker for the tests that need no faults, on SQLite and on PostgreSQL."""
    service = start_service("shared", workers=("shared",), TINYGPT_MAX_UPLOAD_MB="0.5", TINYGPT_WARM_JOBS="true",
                            **database)
    yield service.home, service.app
    service.stop()  # before the next database's service starts


# -- a run from creation to its end ------------------------------------------------------------
def test_run_end_to_end_through_the_event_stream(shared):
    home, app = shared
    with app.client() as c:
        run = create(c, steps=30, eval_every=10, name="e2e", tags=["smoke"])
        assert run["status"] == "queued" and run["steps"] == 30 and run["tags"] == ["smoke"]
        events = read_events(f"{app.url}/api/runs/{run['id']}/events")

        ids = [e["id"] for e in events if "id" in e]
        assert ids == sorted(ids) and len(ids) == len(set(ids))
        assert events[-1]["event"] == "end"
        statuses = [e["data"]["status"] for e in events if e["event"] == "status"]
        assert statuses == ["running", "succeeded"]
        metric_steps = [e["data"]["step"] for e in events if e["event"] == "metric"]
        assert metric_steps == [0, 10, 20, 30]  # log_every = min(10, eval_every)
        # typed events for what the page shows: what the job resolved, and each new best checkpoint
        [resolved] = [e["data"] for e in events if e["event"] == "resolved"]
        assert (resolved["device"], resolved["precision"], resolved["start_step"]) == ("cpu", "fp32", 0)
        assert resolved["params"] == 475_712 and resolved["device_info"]["type"] == "cpu"
        bests = [(e["data"]["step"], e["data"]["val_loss"]) for e in events if e["event"] == "best_checkpoint"]
        assert [step for step, _ in bests] == [10, 20, 30] and [v for _, v in bests] == sorted(v for _, v in bests)[::-1]
        assert {e["data"]["step"] for e in events if e["event"] == "sample"} == {0, 10, 20, 30}

        final = c.get(f"/api/runs/{run['id']}").json()
        assert final["status"] == "succeeded" and final["last_step"] == 30 and final["has_checkpoint"]
        assert final["device"] == "cpu" and final["precision"] == "fp32" and final["device_info"]["type"] == "cpu"
        assert final["best_step"] == 30 and final["best_val_loss"] > 0
        # the files an ended run leaves: best.pt (weights only), no resume point, and the disk they use
        folder = home.path / "runs" / str(run["id"])
        assert (folder / "best.pt").exists() and not (folder / "last.pt").exists()
        assert final["disk_bytes"] == sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        assert "pid" not in final and "checkpoint_path" not in final and "worker_host" not in final  # internal fields
        assert final["worker"] == {"name": "shared", "host": socket.gethostname()}  # where it ran

        metrics = c.get(f"/api/runs/{run['id']}/metrics").json()
        assert [m["step"] for m in metrics] == [0, 10, 20, 30]
        assert metrics[-1]["val_loss"] < metrics[0]["val_loss"]
        csv_text = c.get(f"/api/runs/{run['id']}/metrics", params={"format": "csv"}).text
        lines = csv_text.strip().splitlines()
        assert lines[0] == "step,train_loss,val_loss,lr,tokens_per_sec,elapsed_sec,tokens_seen,epochs,peak_mem_mib,val_loss_full"
        assert len(lines) == 5

        samples = c.get(f"/api/runs/{run['id']}/samples").json()
        assert [s["step"] for s in samples] == [0, 10, 20, 30] and all(s["text"].startswith("Holmes") for s in samples)

        ckpt = c.get(f"/api/runs/{run['id']}/checkpoint")
        assert ckpt.status_code == 200
        state = torch.load(io.BytesIO(ckpt.content), weights_only=True)  # our own checkpoints need no unpickling
        assert state["step"] == 30 and state["model_config"]["vocab_size"] == 4096

        # reconnecting with Last-Event-ID gives exactly the events after it
        middle = ids[len(ids) // 2]
        again = read_events(f"{app.url}/api/runs/{run['id']}/events", last_event_id=middle)
        assert [e["id"] for e in again if "id" in e] == [i for i in ids if i > middle]

        holmes = next(d for d in c.get("/api/datasets").json() if d["name"] == "holmes")
        assert holmes["builtin"] and holmes["sha256"] and holmes["bytes"] == home.corpus.stat().st_size
        assert {"vocab_size": 4096}.items() <= holmes["tokenizers"][0].items()

        # rename, tag, filter
        patched = c.patch(f"/api/runs/{run['id']}", json={"name": "renamed", "tags": ["a", "b"], "notes": "n"}).json()
        assert (patched["name"], patched["tags"], patched["notes"]) == ("renamed", ["a", "b"], "n")
        assert [r["id"] for r in c.get("/api/runs", params={"tag": "b"}).json()["items"]] == [run["id"]]
        assert c.get("/api/runs", params={"status": "succeeded", "limit": 1}).json()["limit"] == 1


def test_sample_streams_tokens_from_the_best_checkpoint(shared):
    home, app = shared
    engine_independent(home)
    with app.client() as c:
        run = create(c, steps=10, eval_every=10)
        read_events(f"{app.url}/api/runs/{run['id']}/events")
        body = {"prompt": "Holmes", "max_tokens": 12, "temperature": 0.8, "top_k": 40, "seed": 5}
        texts = []
        for _ in range(2):
            with c.stream("POST", f"/api/runs/{run['id']}/sample", json=body) as response:
                assert response.status_code == 200
                raw = "".join(response.iter_text())
            tokens = [line for line in raw.splitlines() if line.startswith("event: token")]
            assert len(tokens) >= 1
            assert "event: end" in raw
            texts.append(raw.split("event: end")[1])
        assert texts[0] == texts[1]  # same seed, same text
        # prompts with control characters, unknown bytes, nothing at all, or more than the context
        for prompt in ["\x00\x1b[31mred\x07\r\n", "", "🦊 " * 400]:
            response = c.post(f"/api/runs/{run['id']}/sample", json={**body, "prompt": prompt, "max_tokens": 3})
            assert response.status_code == 200 and "event: end" in response.text and "event: error" not in response.text
        lone_surrogate = json.dumps({**body, "prompt": "x"}).replace('"x"', '"\\udcff"')  # valid JSON, not UTF-8
        response = c.post(f"/api/runs/{run['id']}/sample", content=lone_surrogate,
                          headers={"Content-Type": "application/json"})
        assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "prompt"]
        assert response.json()["detail"][0]["input"] == "\\udcff"
        neighbours = c.get(f"/api/runs/{run['id']}/neighbors", params={"word": " the", "k": 3}).json()
        assert len(neighbours) == 3 and all(-1 <= n["similarity"] <= 1 for n in neighbours)
        bad = c.get(f"/api/runs/{run['id']}/neighbors", params={"word": "Sherlock Holmes said"})
        assert bad.status_code == 422 and "not one" in bad.text


@pytest.mark.slow  # 15 s on 2 cores; the comparison's figures stay in the default suite (tests/test_reporting.py)
def test_compare_two_runs_of_the_same_seed(shared):
    home, app = shared
    engine_independent(home)
    with app.client() as c:
        response = c.post("/api/runs", json={**TINY, "steps": 20, "eval_every": 10, "device": ["cpu", "auto"]})
        assert response.status_code == 201
        pair = response.json()
        assert len(pair) == 2 and pair[0]["group_id"] and pair[0]["group_id"] == pair[1]["group_id"]
        for r in pair:
            read_events(f"{app.url}/api/runs/{r['id']}/events")
        group = c.get("/api/runs", params={"group": pair[0]["group_id"]}).json()
        assert group["total"] == 2
        result = c.get("/api/compare", params={"ids": f"{pair[0]['id']},{pair[1]['id']}"}).json()
        assert result["shared_eval_steps"] == [0, 10, 20]
        assert result["max_val_loss_gap"] < 1e-4  # same seed, same batches, same device type
        assert result["config_differences"] == {"device": ["cpu", "auto"]}
        assert all(r["tokens_per_sec"] > 0 and r["speedup_vs_first"] > 0 for r in result["runs"])


def test_cancel_stops_within_two_seconds_and_keeps_data(shared):
    home, app = shared
    engine_independent(home)  # the cancel path is the job's; its writes on PostgreSQL: tests/test_cancel.py
    with app.client() as c:
        run = create(c, steps=100_000, eval_every=20)
        wait_for(lambda: c.get(f"/api/runs/{run['id']}").json()["best_step"], message="a best checkpoint")
        t0 = time.monotonic()
        assert c.post(f"/api/runs/{run['id']}/cancel").status_code == 200
        wait_for(lambda: run_status(c, run["id"]) == "cancelled", timeout=10, interval=0.05, message="cancelled")
        assert time.monotonic() - t0 < 2.0
        final = c.get(f"/api/runs/{run['id']}").json()
        assert final["has_checkpoint"] and final["error"] == "cancelled by request"
        assert len(c.get(f"/api/runs/{run['id']}/metrics").json()) >= 2
        assert c.get(f"/api/runs/{run['id']}/checkpoint").status_code == 200
        assert c.post(f"/api/runs/{run['id']}/cancel").status_code == 409  # already finished
        events = read_events(f"{app.url}/api/runs/{run['id']}/events")
        assert events[-1]["event"] == "end"


def test_failing_job_ends_failed_with_its_error(shared):
    home, app = shared
    engine_independent(home)
    with app.client() as c:
        files = {"file": ("gone.txt", b"some text " * 300, "text/plain")}  # long enough for context 128
        assert c.post("/api/datasets", data={"name": "gone"}, files=files).status_code == 201
        (home.path / "datasets" / "gone.txt").unlink()
        run = create(c, steps=10, dataset="gone")
        events = read_events(f"{app.url}/api/runs/{run['id']}/events", timeout=60)
        final = c.get(f"/api/runs/{run['id']}").json()
        assert final["status"] == "failed"
        assert "dataset 'gone' file is missing" in final["error"]
        assert events[-2]["data"]["status"] == "failed"
        # the worker keeps serving
        ok = create(c, steps=5, eval_every=5)
        read_events(f"{app.url}/api/runs/{ok['id']}/events")
        assert run_status(c, ok["id"]) == "succeeded"


def test_job_killed_by_a_signal_ends_crashed_naming_it(shared):
    import os

    from app.db import session_scope
    from app.models import Run
    from app.settings import Settings

    home, app = shared
    engine_independent(home)
    with app.client() as c:
        run = create(c, steps=100_000, eval_every=50)
        wait_for(lambda: c.get(f"/api/runs/{run['id']}").json()["last_step"] > 0, timeout=60, message="training")
        with session_scope(Settings(home=home.path, database_url=home.extra_env.get("TINYGPT_DATABASE_URL"))) as s:
            pid = s.get(Run, run["id"]).pid
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: run_status(c, run["id"]) == "crashed", timeout=20, message="crashed")
        final = c.get(f"/api/runs/{run['id']}").json()
        assert final["error"] == "job process killed by SIGKILL (out of memory?)"
        ok = create(c, steps=5, eval_every=5)  # the worker keeps serving
        read_events(f"{app.url}/api/runs/{ok['id']}/events")
        assert run_status(c, ok["id"]) == "succeeded"


def test_delete_only_when_not_running(shared):
    home, app = shared
    with app.client() as c:
        run = create(c, steps=100_000, eval_every=50)
        wait_for(lambda: run_status(c, run["id"]) == "running", message="running")
        response = c.delete(f"/api/runs/{run['id']}")
        assert response.status_code == 409 and "cancel it first" in response.json()["detail"]
        c.post(f"/api/runs/{run['id']}/cancel")
        wait_for(lambda: run_status(c, run["id"]) == "cancelled", timeout=10, message="cancelled")
        assert c.delete(f"/api/runs/{run['id']}").status_code == 204
        assert c.get(f"/api/runs/{run['id']}").status_code == 404


# -- bad input: 422 naming the field -----------------------------------------------------------
@pytest.mark.parametrize("body, field, message", [
    ({"preset": "huge"}, "preset", "preset must be one of holmes, tiny, student, small; got 'huge'"),
    ({"steps": 0}, "steps", "steps must be in [1, 10000000], got 0"),
    ({"batch_size": "many"}, "batch_size", "valid integer"),
    ({"lr": 0}, "lr", "lr must be in (0, 1], got 0.0"),
    ({"device": "gpu"}, "device", "unknown device 'gpu'"),
    ({"device": "cuda:7"}, "device", "cuda:7"),
    ({"precision": "fp8"}, "precision", "precision must be one of auto, fp32, bf16, fp16; got 'fp8'"),
    ({"dataset": "nope"}, "dataset", "unknown dataset 'nope'"),
    ({"arch": "weird"}, "arch", "arch must be one of series, classic, modern; got 'weird'"),
    ({"tags": ["x" * 51]}, "tags", "1-50 characters"),
    ({"steps": 10_000_001}, "steps", "steps must be in [1, 10000000], got 10000001"),
])
def test_bad_run_bodies_get_422_naming_the_field(shared, body, field, message):
    home, app = shared
    with app.client() as c:
        before = c.get("/api/runs").json()["total"]
        response = c.post("/api/runs", json={**TINY, "steps": 10, **body})
        assert response.status_code == 422, response.text
        detail = response.json()["detail"]
        assert any(d["loc"][-1] == field or field in d["loc"] for d in detail), detail
        assert message in response.text
        assert c.get("/api/runs").json()["total"] == before  # nothing half-created


def test_unknown_ids(shared):
    home, app = shared
    with app.client() as c:
        assert c.get("/api/runs/999999").status_code == 404
        assert c.get("/api/runs/999999/events").status_code == 404
        assert c.post("/api/runs/999999/cancel").status_code == 404
        assert c.get("/api/compare", params={"ids": "1"}).status_code == 422


def test_dataset_uploads(shared):
    home, app = shared
    with app.client() as c:
        ok = c.post("/api/datasets", data={"name": "poems"}, files={"file": ("p.txt", "Ünïcödé verse\n".encode(), "text/plain")})
        assert ok.status_code == 201 and ok.json()["bytes"] == len("Ünïcödé verse\n".encode())
        names = [d["name"] for d in c.get("/api/datasets").json()]
        assert names[0] == "holmes" and "poems" in names
        binary = c.post("/api/datasets", data={"name": "bin"}, files={"file": ("b.bin", b"\xff\xfe\x00\x01", "x")})
        assert binary.status_code == 422 and "not UTF-8" in binary.text
        big = c.post("/api/datasets", data={"name": "big"}, files={"file": ("big.txt", b"a" * 600_000, "text/plain")})
        assert big.status_code == 413 and "upload limit of 0.5 MB" in big.text
        dup = c.post("/api/datasets", data={"name": "poems"}, files={"file": ("p.txt", b"x", "text/plain")})
        assert dup.status_code == 422 and "already exists" in dup.text
        evil = c.post("/api/datasets", data={"name": "../etc"}, files={"file": ("p.txt", b"x", "text/plain")})
        assert evil.status_code == 422
        assert not list((home.path / "datasets").glob(".upload-*"))  # nothing left behind


def test_presets_devices_health(shared):
    home, app = shared
    engine_independent(home)
    with app.client() as c:
        presets = {p["name"]: p for p in c.get("/api/presets").json()}
        assert presets["holmes"]["params"]["series"] == 5_781_504
        devices = {d["device"]: d for d in c.get("/api/devices").json()}
        assert devices["cpu"]["available"]
        assert c.get("/healthz").json() == {"status": "ok", "version": __version__}
        assert c.get("/openapi.json").status_code == 200


# -- benchmark runs --------------------------------------------------------------------------
def test_benchmark_run_end_to_end(shared):
    home, app = shared
    engine_independent(home)
    with app.client() as c:
        response = c.post("/api/benchmarks", json={"preset": "tiny", "device": "cpu", "batch_sizes": [2, 4],
                                                   "precisions": ["fp32"], "threads": [1, 2], "steps": 1, "warmup": 0})
        assert response.status_code == 201, response.text
        created = response.json()
        run_id = created["run"]["id"]
        assert created["run"]["kind"] == "benchmark" and created["run"]["status"] == "queued" and created["cells"] == []
        events = read_events(f"{app.url}/api/runs/{run_id}/events")
        logs = [e["data"]["message"] for e in events if e["event"] == "log"]
        assert logs[0].startswith("benchmark of 4 cells on cpu")
        assert [m.split(":")[0] for m in logs[1:]] == ["fp32, batch 2, 1 threads", "fp32, batch 4, 1 threads",
                                                       "fp32, batch 2, 2 threads", "fp32, batch 4, 2 threads"]
        bench = c.get(f"/api/benchmarks/{run_id}").json()
        assert bench["run"]["status"] == "succeeded" and bench["run"]["steps"] == 4 and bench["run"]["last_step"] == 4
        assert [(x["batch_size"], x["threads"]) for x in bench["cells"]] == [(2, 1), (4, 1), (2, 2), (4, 2)]
        assert all(x["tokens_per_sec"] > 0 and not x["oom"] and x["peak_mem_mib"] > 0 for x in bench["cells"])
        assert run_id in [b["run"]["id"] for b in c.get("/api/benchmarks").json()]
        estimates = [e for e in c.get("/api/benchmarks/estimates").json() if e["run_id"] == run_id]
        assert sorted(e["batch_size"] for e in estimates) == [2, 4]
        fastest = max(x["tokens_per_sec"] for x in bench["cells"] if x["batch_size"] == 2)
        assert next(e for e in estimates if e["batch_size"] == 2)["tokens_per_sec"] == fastest


@pytest.mark.parametrize("body, field, message", [
    ({"batch_sizes": [0]}, "batch_sizes", "each batch size must be in [1, 4096]"),
    ({"batch_sizes": []}, "batch_sizes", "at least 1 item"),
    ({"precisions": ["fp8"]}, "precisions", "unknown precision 'fp8'"),
    ({"threads": [0]}, "threads", "each thread count must be in [1, 1024]"),
    ({"preset": "huge"}, "preset", "preset must be one of holmes, tiny, student, small; got 'huge'"),
    ({"device": "gpu"}, "device", "unknown device 'gpu'"),
    ({"device": "cuda:3"}, "device", "cuda:3"),
    ({"steps": 1000}, "steps", "less than or equal to 100"),
])
def test_bad_benchmark_bodies_get_422_naming_the_field(shared, body, field, message):
    home, app = shared
    with app.client() as c:
        before = len(c.get("/api/benchmarks").json())
        response = c.post("/api/benchmarks", json={"preset": "tiny", **body})
        assert response.status_code == 422, response.text
        assert any(field in d["loc"] for d in response.json()["detail"]), response.text
        assert message in response.text
        assert len(c.get("/api/benchmarks").json()) == before


def test_a_training_run_is_not_a_benchmark(shared):
    home, app = shared
    with app.client() as c:
        run = create(c, steps=5)
        response = c.get(f"/api/benchmarks/{run['id']}")
        assert response.status_code == 404 and response.json()["detail"] == f"benchmark {run['id']} does not exist"


# -- faults: the worker killed, stopped; two workers -------------------------------------------
@pytest.mark.slow  # 75 s: `make test-slow` (CI runs it); the SIGTERM test below covers resuming in the default suite
def test_worker_sigkill_mid_run_then_restart_resumes(tmp_path, slice_path, warm_cache, database_faults):
    """A worker killed alone (SIGKILL): its job hears of it (worker/parent.py), stops at its next step boundary
    with last.pt saved and puts the run back in the queue; the next worker resumes it."""
    home = make_home(tmp_path, slice_path, warm_cache, **database_faults)
    app = AppServer(home)
    worker = Worker(home, "w1")
    try:
        with app.client() as c:
            run = create(c, steps=150, eval_every=20)
            wait_for(lambda: c.get(f"/api/runs/{run['id']}").json()["last_step"] >= 45, timeout=120, message="step 45")
            worker.signal(signal.SIGKILL)
            worker.popen.wait()
            before = c.get(f"/api/runs/{run['id']}/metrics").json()
            assert before
            time.sleep(1)
            worker = Worker(home, "w1")
            wait_for(lambda: "serving devices" in worker.output(), timeout=60, message="the next worker")
            t0 = time.monotonic()  # from when it is ready (a process start on a busy machine took over 5 s)
            wait_for(lambda: run_status(c, run["id"]) in ("queued", "running") and
                     c.get(f"/api/runs/{run['id']}").json()["attempt"] == 2, timeout=30, message="re-claimed")
            assert time.monotonic() - t0 < 5
            events = read_events(f"{app.url}/api/runs/{run['id']}/events", timeout=240)
            statuses = [e["data"]["status"] for e in events if e["event"] == "status"]
            assert statuses == ["running", "queued", "running", "succeeded"]  # never crashed: it stopped in order
            after = c.get(f"/api/runs/{run['id']}/metrics").json()
            steps = [m["step"] for m in after]
            assert steps == sorted(set(steps)) and steps[-1] == 150  # no step twice, none missing at the end
            resumed_at = max(m["step"] for m in before if m["val_loss"] is not None and m["step"] > 0)
            kept = {m["step"]: m for m in before if m["step"] <= resumed_at}
            for m in after:
                if m["step"] in kept:
                    assert m == kept[m["step"]]  # earlier metrics kept as they were
            assert any("resumed at step" in e["data"].get("message", "") for e in events if e["event"] == "log")
    finally:
        worker.stop()
        app.stop()


@pytest.mark.slow  # 51 s on 2 cores (the default suite keeps test_stopping's serve stop-and-resume)
def test_worker_sigterm_requeues_and_next_worker_resumes(tmp_path, slice_path, warm_cache, database_faults):
    home = make_home(tmp_path, slice_path, warm_cache, **database_faults)
    app = AppServer(home)
    worker = Worker(home, "w1")
    try:
        with app.client() as c:
            run = create(c, steps=200, eval_every=50)
            wait_for(lambda: c.get(f"/api/runs/{run['id']}").json()["last_step"] >= 20, timeout=120, message="step 20")
            assert worker.stop() == 0
            stopped = c.get(f"/api/runs/{run['id']}").json()
            assert stopped["status"] == "queued", worker.output()
            step = stopped["last_step"]
            worker = Worker(home, "w2")
            read_events(f"{app.url}/api/runs/{run['id']}/events", timeout=480)
            final = c.get(f"/api/runs/{run['id']}").json()
            assert final["status"] == "succeeded" and final["attempt"] == 2
            log = [e["data"]["message"] for e in read_events(f"{app.url}/api/runs/{run['id']}/events")
                   if e["event"] == "log"]
            assert any(f"resumed at step {step}" in m or "resumed at step" in m for m in log)
    finally:
        worker.stop()
        app.stop()


@pytest.mark.slow  # 37 s on 2 cores; exclusive claims stay in the default suite (four processes claiming)
def test_two_workers_never_take_the_same_run(tmp_path, slice_path, warm_cache, database_faults):
    home = make_home(tmp_path, slice_path, warm_cache, **database_faults)
    app = AppServer(home)
    workers = [Worker(home, "a"), Worker(home, "b")]
    try:
        with app.client() as c:
            runs = [create(c, steps=5, eval_every=5, threads=1) for _ in range(4)]  # 2 jobs on 2 cores
            for r in runs:
                events = read_events(f"{app.url}/api/runs/{r['id']}/events", timeout=180)
                assert [e["data"]["status"] for e in events if e["event"] == "status"] == ["running", "succeeded"]
            finals = [c.get(f"/api/runs/{r['id']}").json() for r in runs]
            assert all(f["attempt"] == 1 and f["status"] == "succeeded" for f in finals)
    finally:
        for w in workers:
            w.stop()
        app.stop()


@pytest.mark.slow  # about a minute on 2 cores (16 jobs); CI runs it with `make test-slow`
@pytest.mark.scale
def test_four_workers_run_sixteen_queued_runs_exactly_once(tmp_path, slice_path, warm_cache, postgres):
    """PostgreSQL: claims lock rows and skip locked ones, so no run is taken twice or left behind."""
    from sqlmodel import select

    from app.db import session_scope
    from app.models import Run
    from app.settings import Settings

    RUNS = 16  # four each, if shared out evenly  # noqa: N806
    url = postgres.create_database()
    # warm job processes, as a worker has by default (each job starts without importing torch: 8% faster here)
    # the default stale limit (the tests' 4 s is for crash tests): eight processes importing torch at once on two
    # cores may hold a heartbeat back a few seconds, and this test is about claims, not crash detection
    home = make_home(tmp_path, slice_path, warm_cache, TINYGPT_DATABASE_URL=url, TINYGPT_WARM_JOBS="true",
                     TINYGPT_STALE_AFTER_SEC="10")
    app = AppServer(home)
    workers = []
    try:
        with app.client() as c:
            # one training thread each: four jobs at once on two cores must not oversubscribe them
            runs = [create(c, steps=1, eval_every=1, threads=1) for _ in range(RUNS)]
            workers = [Worker(home, f"w{i}") for i in range(4)]
            ids = {r["id"] for r in runs}

            def finished() -> bool:
                items = c.get("/api/runs", params={"limit": 500}).json()["items"]
                return all(r["status"] in ("succeeded", "failed", "crashed") for r in items if r["id"] in ids)

            wait_for(finished, timeout=600, interval=1, message=f"all {RUNS} finished")
            for run in runs:  # each run's history: claimed once ("running" once), then succeeded
                events = read_events(f"{app.url}/api/runs/{run['id']}/events", timeout=30)
                statuses = [e["data"]["status"] for e in events if e["event"] == "status"]
                assert statuses == ["running", "succeeded"], (run["id"], statuses)
        with session_scope(Settings(home=home.path, database_url=url)) as s:
            done = s.exec(select(Run).where(Run.id.in_(ids))).all()  # type: ignore[attr-defined]
        assert len(done) == RUNS and all(r.attempt == 1 for r in done)
        per_worker = {w: sum(1 for r in done if r.worker == w) for w in {r.worker for r in done}}
        assert sum(per_worker.values()) == RUNS and len(per_worker) >= 2, per_worker  # shared out, each run once
    finally:
        for w in workers:
            w.stop()
        app.stop()


@pytest.mark.slow  # 60 s; tests/test_distributed.py checks the two-rank curve in the default suite
def test_a_two_process_run_reports_each_metric_once_and_matches_one_process(tmp_path, slice_path, warm_cache):
    """gpus=2 on the CPU: the worker launches torchrun with two gloo ranks; rank 0 alone reports."""
    home = make_home(tmp_path, slice_path, warm_cache)
    app = AppServer(home)
    worker = Worker(home, "ddp")
    try:
        with app.client() as c:
            common = {"steps": 20, "eval_every": 10, "batch_size": 8, "threads": 1}
            one = create(c, **common)
            two = create(c, **common, gpus=2)
            assert two["config"]["gpus"] == 2
            for run in (one, two):
                events = read_events(f"{app.url}/api/runs/{run['id']}/events", timeout=300)
                assert [e["data"]["status"] for e in events if e["event"] == "status"] == ["running", "succeeded"]
            m1 = c.get(f"/api/runs/{one['id']}/metrics").json()
            m2 = c.get(f"/api/runs/{two['id']}/metrics").json()
            assert [m["step"] for m in m2] == [0, 10, 20]  # once each, not once per rank
            samples = c.get(f"/api/runs/{two['id']}/samples").json()
            assert sorted(s["step"] for s in samples) == [0, 10, 20]
            for a, b in zip(m1, m2, strict=True):
                assert abs(a["val_loss"] - b["val_loss"]) < 2e-3 and a["tokens_seen"] == b["tokens_seen"]
            assert c.get(f"/api/runs/{two['id']}").json()["has_checkpoint"]
            bad = c.post("/api/runs", json={**TINY, "steps": 5, "batch_size": 3, "gpus": 2})
            assert bad.status_code == 422 and "batch_size 3 must divide evenly over 2 processes" in bad.text
    finally:
        worker.stop()
        app.stop()


CLAIMER = """
import sys
from app.db import session_scope
from app.models import RunStatus
from app.settings import Settings
from worker.queue import claim_next
from app.services.lifecycle import change_status

settings = Settings(home=sys.argv[1], database_url=sys.argv[2])
claimed = []
while True:
    with session_scope(settings) as s:
        run = claim_next(s, worker=sys.argv[3], host="test", slot="cpu")
        if run is None:
            break
        claimed.append(run.id)
        change_status(s, run, RunStatus.succeeded, settings=settings)
print(" ".join(map(str, claimed)))
"""


def test_claims_from_four_processes_take_each_run_exactly_once(tmp_path, postgres):
    """The queue itself under contention: 4 processes claim 200 runs from one PostgreSQL database."""
    import subprocess
    import sys

    from app.db import init_db, session_scope
    from app.models import Run
    from app.settings import Settings

    url = postgres.create_database()
    settings = Settings(home=tmp_path, database_url=url)
    init_db(settings)
    with session_scope(settings) as s:
        s.add_all(Run(name=f"r{i}", config={"preset": "tiny"}, requested_device="cpu") for i in range(200))
    procs = [subprocess.Popen([sys.executable, "-c", CLAIMER, str(tmp_path), url, f"c{i}"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(4)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, outputs
    claimed = [int(x) for out, _ in outputs for x in out.split()]
    assert sorted(claimed) == sorted(set(claimed)) and len(claimed) == 200
    assert sum(1 for out, _ in outputs if out.split()) >= 2  # the work was shared
