"""Hand-written bad input: every case gets a clear 4xx naming what is wrong, never a 500.

A real app process on a real SQLite file; runs in every status come from a factory that writes
them to the database (no worker needed).
"""

from __future__ import annotations

import json
import os

import httpx
import pytest

from .service_helpers import AppServer, Home

RUN = {"preset": "tiny", "device": "cpu", "precision": "fp32", "batch_size": 4, "steps": 5, "eval_every": 5}
STATUSES = ["queued", "running", "succeeded", "failed", "cancelled", "crashed"]


@pytest.fixture(scope="module")
def bare(tmp_path_factory, slice_path):
    home = Home(tmp_path_factory.mktemp("bad-input"), slice_path)
    app = AppServer(home)
    yield home, app
    app.stop()


def make_run(home: Home, status: str, **fields: object) -> int:
    """A run row in the given status, as a worker would have left it."""
    from app.db import session_scope
    from app.models import Run, RunStatus
    from app.settings import Settings

    settings = Settings(home=home.path)
    with session_scope(settings) as s:
        run = Run(name=f"a {status} run", config=RUN, requested_device="cpu", status=RunStatus(status), **fields)
        s.add(run)
        s.flush()
        run.out_dir = str(settings.runs_dir / str(run.id))
        return run.id


def field_of(response: httpx.Response) -> str:
    return response.json()["detail"][0]["loc"][-1]


# -- cancel and delete in every status ---------------------------------------------------------------
@pytest.mark.parametrize("status", STATUSES)
def test_cancel_in_every_status(bare, status):
    home, app = bare
    run_id = make_run(home, status)
    response = httpx.post(f"{app.url}/api/runs/{run_id}/cancel", timeout=30)
    if status == "queued":
        assert response.status_code == 200 and response.json()["status"] == "cancelled"
    elif status == "running":
        assert response.status_code == 200 and response.json()["status"] == "running"  # the job stops itself
    else:
        assert response.status_code == 409
        assert response.json() == {"detail": f"run {run_id} has already finished ({status})"}


@pytest.mark.parametrize("status", STATUSES)
def test_delete_in_every_status(bare, status):
    home, app = bare
    run_id = make_run(home, status)
    response = httpx.delete(f"{app.url}/api/runs/{run_id}", timeout=30)
    if status == "running":
        assert response.status_code == 409
        assert response.json() == {"detail": f"run {run_id} is running; cancel it first"}
        assert httpx.get(f"{app.url}/api/runs/{run_id}", timeout=30).status_code == 200
    else:
        assert response.status_code == 204
        assert httpx.get(f"{app.url}/api/runs/{run_id}", timeout=30).status_code == 404


@pytest.mark.parametrize("method, path", [
    ("GET", "/api/runs/{}"), ("PATCH", "/api/runs/{}"), ("DELETE", "/api/runs/{}"), ("POST", "/api/runs/{}/cancel"),
    ("GET", "/api/runs/{}/metrics"), ("GET", "/api/runs/{}/samples"), ("GET", "/api/runs/{}/checkpoint"),
    ("POST", "/api/runs/{}/sample"), ("GET", "/api/runs/{}/events"), ("GET", "/api/benchmarks/{}"),
])
@pytest.mark.parametrize("run_id, status", [(987654321, 404), (0, 422), (-3, 422), (2**64, 422), ("abc", 422)])
def test_ids_that_do_not_exist_or_cannot(bare, method, path, run_id, status):
    _, app = bare
    body = {"name": "x"} if method == "PATCH" else {} if method == "POST" else None
    response = httpx.request(method, f"{app.url}{path.format(run_id)}", json=body, timeout=30)
    assert response.status_code == status
    if status == 422:
        assert response.json()["detail"][0]["loc"] == ["path", "run_id"]


# -- strings, numbers and types ------------------------------------------------------------------
@pytest.mark.parametrize("body, field", [
    ({"name": ""}, "name"), ({"name": "n" * 201}, "name"), ({"tags": ["t"] * 51}, "tags"), ({"tags": [""]}, "tags"),
    ({"sample_prompt": "p" * 1001}, "sample_prompt"), ({"steps": 1e30}, "steps"), ({"steps": -1}, "steps"),
    ({"steps": "ten"}, "steps"), ({"batch_size": 10**9}, "batch_size"), ({"seed": 2**64}, "seed"),
    ({"threads": -1}, "threads"), ({"compile": "maybe"}, "compile"), ({"gpus": 0}, "gpus"),
    ({"eval_every": 0}, "eval_every"), ({"precision": ""}, "precision"), ({"preset": "../../etc"}, "preset"),
    ({"device": ["cpu"] * 9}, "device"), ({"device": []}, "device"), ({"dataset": "../holmes"}, "dataset"),
])
def test_bad_run_fields_are_named(bare, body, field):
    _, app = bare
    response = httpx.post(f"{app.url}/api/runs", json={**RUN, **body}, timeout=30)
    assert response.status_code == 422, response.text
    assert field_of(response) == field


def test_process_and_thread_counts_are_bounded_by_the_machine(bare):
    """One request must not start more training processes, or threads, than the machine has cores."""
    _, app = bare
    cores = os.cpu_count()
    many = {**RUN, "device": "cpu", "gpus": 64, "batch_size": 64}
    response = httpx.post(f"{app.url}/api/runs", json=many, timeout=30)
    assert response.status_code == 422, response.text
    assert response.json()["detail"] == [{"loc": ["body", "gpus"], "type": "value_error",
                                          "msg": f"gpus must be at most {cores} on cpu (this machine's {cores} CPU cores)"}]
    response = httpx.post(f"{app.url}/api/runs", json={**RUN, "threads": cores + 1}, timeout=30)
    assert response.status_code == 422
    assert response.json()["detail"][0] == {"loc": ["body", "threads"], "type": "value_error",
                                            "msg": f"threads must be at most this machine's {cores} CPU cores"}
    response = httpx.post(f"{app.url}/api/benchmarks", json={"preset": "tiny", "device": "cpu", "threads": [1, 999]},
                          timeout=30)
    assert response.status_code == 422 and field_of(response) == "threads"
    # at the limit it is accepted
    ok = httpx.post(f"{app.url}/api/runs", json={**RUN, "gpus": cores, "batch_size": 4 * cores, "threads": 1}, timeout=30)
    assert ok.status_code == 201, ok.text
    httpx.post(f"{app.url}/api/runs/{ok.json()[0]['id']}/cancel", timeout=30)


@pytest.mark.parametrize("raw", ['{"preset": "tiny", "lr": NaN}', '{"preset": "tiny", "lr": Infinity}'])
def test_numbers_json_cannot_hold_are_refused(bare, raw):
    _, app = bare
    response = httpx.post(f"{app.url}/api/runs", content=raw, headers={"Content-Type": "application/json"}, timeout=30)
    assert response.status_code == 422
    assert field_of(response) == "lr" and response.json()["detail"][0]["input"] in ("nan", "inf")


@pytest.mark.parametrize("raw", ["[1, 2]", '"a string"', "null", "{not json", b"\x00\x01\x02"])
def test_bodies_that_are_not_a_json_object(bare, raw):
    _, app = bare
    response = httpx.post(f"{app.url}/api/runs", content=raw, headers={"Content-Type": "application/json"}, timeout=30)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][0] == "body"


def test_a_body_that_is_not_utf8_is_a_parse_error(bare):
    _, app = bare
    response = httpx.post(f"{app.url}/api/runs", content=b'{"preset": "\xff\xfe"}',
                          headers={"Content-Type": "application/json"}, timeout=30)
    assert response.status_code == 400 and response.json() == {"detail": "There was an error parsing the body"}


def test_updates_with_bad_fields(bare):
    home, app = bare
    run_id = make_run(home, "succeeded")
    for body, field in [({"notes": "n" * 20_001}, "notes"), ({"name": ""}, "name"), ({"tags": "not a list"}, "tags")]:
        response = httpx.patch(f"{app.url}/api/runs/{run_id}", json=body, timeout=30)
        assert response.status_code == 422 and field_of(response) == field


@pytest.mark.parametrize("body, field", [
    ({"prompt": "p" * 10_001}, "prompt"), ({"max_tokens": 0}, "max_tokens"), ({"max_tokens": 10**6}, "max_tokens"),
    ({"temperature": -1}, "temperature"), ({"top_p": 0}, "top_p"), ({"top_k": 0}, "top_k"), ({"seed": -1}, "seed"),
])
def test_bad_sample_requests_are_named(bare, body, field):
    home, app = bare
    run_id = make_run(home, "succeeded")
    response = httpx.post(f"{app.url}/api/runs/{run_id}/sample", json=body, timeout=30)
    assert response.status_code == 422 and field_of(response) == field


def test_neighbours_and_compare_with_bad_queries(bare):
    home, app = bare
    run_id = make_run(home, "succeeded")
    assert httpx.get(f"{app.url}/api/runs/{run_id}/neighbors", params={"word": ""}, timeout=30).status_code == 422
    assert httpx.get(f"{app.url}/api/runs/{run_id}/neighbors", params={"word": "w" * 101}, timeout=30).status_code == 422
    for ids, message in [("1,x", "ids must be comma-separated integers"), ("1", "give at least two run ids to compare"),
                         (f"1,{2**70}", "run ids must be positive 64-bit integers"),
                         (",".join(map(str, range(1, 12))), "compare at most 10 runs at once (got 11)")]:
        response = httpx.get(f"{app.url}/api/compare", params={"ids": ids}, timeout=30)
        assert response.status_code == 422 and response.json()["detail"][0]["msg"] == message


# -- names that become file paths, and downloads ----------------------------------------------------
@pytest.mark.parametrize("name", ["../evil", "a/b", "a\\b", "..", ".hidden", "-x", "n" * 65, "", "nul\x00x", "holmes",
                                  "tab\tname", "ünïcode"])
def test_dataset_names_that_would_be_paths_are_refused(bare, name):
    home, app = bare
    files = {"file": ("f.txt", b"some text\n", "text/plain")}
    response = httpx.post(f"{app.url}/api/datasets", data={"name": name}, files=files, timeout=30)
    assert response.status_code == 422
    assert field_of(response) == "name"
    assert not (home.path / "evil.txt").exists() and not (home.path / "datasets" / "a").exists()


@pytest.mark.parametrize("content, message", [
    (b"\xff\xfe\x00\x01", "file is not UTF-8 text (bad byte near offset 0)"),
    (b"text then \xc3", "file is not UTF-8 text (it ends inside a character)"),
    (b"nul \x00 inside", "file is not text (it contains NUL bytes)"),
    (b"", "file is empty"), (b"  \n\t ", "file is empty"),
])
def test_uploads_that_are_not_text(bare, content, message):
    home, app = bare
    response = httpx.post(f"{app.url}/api/datasets", data={"name": "upload"}, files={"file": ("f.bin", content)},
                          timeout=30)
    assert response.status_code == 422
    assert response.json()["detail"] == [{"loc": ["body", "file"], "msg": message, "type": "value_error"}]
    assert not list((home.path / "datasets").glob(".upload-*"))


def test_a_context_longer_than_the_dataset_is_refused_before_the_run_is_queued(bare):
    """Bytes bound the tokens (a byte-level BPE token is at least one byte) until a job has counted
    them; then the count decides. The API and the form give the library's message beside ``context``."""
    from app.db import session_scope
    from app.services.datasets import record_tokenizer
    from app.settings import Settings

    home, app = bare
    upload = httpx.post(f"{app.url}/api/datasets", data={"name": "short"},
                        files={"file": ("s.txt", b"a few words. " * 77 + b"end", "text/plain")}, timeout=30)
    assert upload.status_code == 201 and upload.json()["bytes"] == 1004
    short = {**RUN, "dataset": "short"}
    response = httpx.post(f"{app.url}/api/runs", json=short, timeout=30)  # tiny: context 128
    assert response.status_code == 422
    assert response.json()["detail"] == [{"loc": ["body", "context"], "type": "value_error", "msg":
        "context 128 is too long for dataset 'short': corpus is too short: 1004 tokens leave 100 for validation, "
        "fewer than one window of context 128 + 1"}]
    form = httpx.post(f"{app.url}/new", data={**short, "context": "128"}, timeout=30)
    assert form.status_code == 422
    assert ('<span class="field-error" id="error-context">context 128 is too long for dataset &#39;short&#39;: '
            "corpus is too short: 1004 tokens leave 100") in form.text
    fits = httpx.post(f"{app.url}/api/runs", json={**short, "context": 64}, timeout=30)
    assert fits.status_code == 201, fits.text
    httpx.post(f"{app.url}/api/runs/{fits.json()[0]['id']}/cancel", timeout=30)
    with session_scope(Settings(home=home.path)) as s:  # a job encoded it: 400 tokens of a 4,096 tokenizer
        record_tokenizer(s, name="short", vocab_size=4096, fingerprint="f" * 16, tokens=400)
    counted = httpx.post(f"{app.url}/api/runs", json={**short, "context": 64}, timeout=30)
    assert counted.status_code == 422
    assert counted.json()["detail"][0]["msg"] == ("context 64 is too long for dataset 'short': corpus is too short: "
                                                  "400 tokens leave 40 for validation, fewer than one window of "
                                                  "context 64 + 1")
    other_size = httpx.post(f"{app.url}/api/runs", json={**short, "context": 64, "vocab_size": 512}, timeout=30)
    assert other_size.status_code == 201, other_size.text  # not counted for that size: the bytes bound
    httpx.post(f"{app.url}/api/runs/{other_size.json()[0]['id']}/cancel", timeout=30)


def test_downloads_only_files_the_database_points_to_inside_the_runs_folder(bare):
    home, app = bare
    (home.path / "runs").mkdir(exist_ok=True)
    for outside in ["/etc/passwd", str(home.path / "tinygpt.db"), str(home.path / "runs" / ".." / "tinygpt.db")]:
        run_id = make_run(home, "succeeded", checkpoint_path=outside)
        response = httpx.get(f"{app.url}/api/runs/{run_id}/checkpoint", timeout=30)
        assert response.status_code == 404
        assert response.json() == {"detail": f"run {run_id}'s checkpoint file is missing"}
    no_checkpoint = make_run(home, "queued")
    response = httpx.get(f"{app.url}/api/runs/{no_checkpoint}/checkpoint", timeout=30)
    assert response.status_code == 404 and response.json() == {"detail": f"run {no_checkpoint} has no checkpoint yet"}
    assert httpx.get(f"{app.url}/static/../app/settings.py", timeout=30).status_code == 404


def test_pages_with_bad_ids_render_an_error_page(bare):
    _, app = bare
    response = httpx.get(f"{app.url}/runs/987654321", timeout=30)
    assert response.status_code == 404 and "<strong>404</strong>" in response.text
    negative = httpx.get(f"{app.url}/runs/-1", timeout=30)  # no such page: an HTML 404 (the API answers a JSON 422)
    assert negative.status_code == 404 and "there is no page /runs/-1" in negative.text
    compare = httpx.get(f"{app.url}/compare", params={"ids": "1,zz"}, timeout=30)
    assert compare.status_code == 200 and "run ids must be numbers separated by commas" in compare.text
    assert json.loads(httpx.get(f"{app.url}/api/runs", params={"offset": 2**64}, timeout=30).text)["detail"][0][
        "loc"] == ["query", "offset"]
