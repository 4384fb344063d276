"""With a token set, nothing is readable without it: every route of the app (the OpenAPI schema's
operations, the pages, the API docs) answers 401 to a client without the token and works with it,
except ``/healthz``, ``/login``/``/logout`` and the static assets. With ``TINYGPT_PUBLIC_READ=true``
the reads open up, but never the model files (checkpoints, exports) or the model's answers (sample, nearest tokens), every
change still needs the token, and no response shows a webhook URL (the public-read matrix).

The routes are listed from the app itself, so a route added later is covered without editing this
test (a GET route with a required query parameter needs an example in ``QUERY``)."""

from __future__ import annotations

import re

import httpx
import pytest
from fastapi.routing import APIRoute, iter_route_contexts

from app.main import create_app
from app.settings import Settings
from tinygpt import __version__

from .conftest import IMPORTED_RUN, checkpoint_file
from .service_helpers import AppServer, Home

TOKEN = "access-test-token-0123456789"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
OPEN = {"/healthz", "/login", "/logout"}
PRIVATE_FILES = {"/api/runs/{run_id}/checkpoint", "/api/runs/{run_id}/export",
                 "/api/2.0/mlflow-artifacts/artifacts/{path:path}"}
MODEL_QUERIES = {"/api/runs/{run_id}/neighbors", "/api/runs/{run_id}/sample", "/api/runs/{run_id}/inside",
                 "/api/runs/{run_id}/inside/checkpoints", "/api/runs/{run_id}/inside/diff",
                 "/api/runs/{run_id}/inside/embeddings"}  # open with TINYGPT_PUBLIC_SAMPLING
# the site's run is no Slurm run: past the guard, its Slurm job line is not found
READ_STATUS = {"/partials/runs/{run_id}/slurm": 404,
               # MLflow's API past the guard: the site has no MLflow run; what it does not serve is MLflow's 404
               "/api/2.0/mlflow/runs/get": 404, "/api/2.0/mlflow/metrics/get-history": 404,
               "/api/2.0/{rest:path}": 404, "/api/3.0/{rest:path}": 404,
               "/api/2.0/mlflow-artifacts/artifacts": 404, "/api/2.0/mlflow-artifacts/artifacts/{path:path}": 404}
HOOK = "https://hooks.example.com/services/T000/B000/secret-webhook-path"  # "stalled" only: never sent here
NOTIFY = {"events": ["stalled"], "urls": [HOOK]}
QUERY = {"/api/compare": "ids={run},{run}", "/api/export": "ids={run}", "/api/runs/{run_id}/export": "format=gguf", "/compare": "ids={run},{run}", "/api/runs/{run_id}/neighbors": "word=%20the", "/api/runs/{run_id}/inside": "text=the%20end",
         "/api/runs/{run_id}/inside/diff": "text=the%20end&other={run}",
         "/new": "from={run}", "/api/2.0/mlflow/experiments/get": "experiment_id=0",
         "/api/2.0/mlflow/experiments/get-by-name": "experiment_name=Default", "/api/2.0/mlflow/runs/get": "run_id=x",
         "/api/2.0/mlflow/metrics/get-history": "run_id=x&metric_key=loss",
         "/api/2.0/mlflow-artifacts/artifacts": "path=0/x/artifacts"}
SWEEP = 1  # the site's one sweep (its trials stay queued)
SWEEP_BODY = {"method": "grid", "parameters": {"lr": {"values": [0.01]}},
              "base": {"preset": "tiny", "device": "cpu", "steps": 2, "notify": NOTIFY}}
GROUP = "access-group"
BENCHMARK_PATHS = {"/api/benchmarks/{run_id}", "/benchmarks/{run_id}", "/partials/benchmarks/{run_id}/cells"}


def app_routes() -> list[tuple[str, str]]:
    """(method, path) of every route the app serves, pages and API alike (not the static files)."""
    routes = iter_route_contexts(create_app(Settings(home="/nonexistent-tinygpt-home")).routes)
    return sorted({(method, r.path) for r in routes if isinstance(r.route, APIRoute) for method in r.methods - {"HEAD"}})


ROUTES = app_routes()
GUARDED = [r for r in ROUTES if r[1] not in OPEN]


@pytest.fixture(scope="module")
def site(tmp_path_factory, slice_path, small_tokenizer):
    """A token-guarded app (no worker: runs created by the tests stay queued) with one finished run (an import,
    with samples and a checkpoint), one benchmark and one sweep."""
    home = Home(tmp_path_factory.mktemp("access") / "home", slice_path, {"TINYGPT_API_TOKEN": TOKEN})
    home.path.mkdir()
    app = AppServer(home)
    checkpoint = checkpoint_file(home.path / "best.pt", small_tokenizer.to_dict())
    with httpx.Client(base_url=app.url, headers=BEARER, timeout=30) as c:
        config = {**IMPORTED_RUN["config"], "notify": NOTIFY}
        run = c.post("/api/runs/import", json={**IMPORTED_RUN, "config": config}).json()["id"]
        assert c.put(f"/api/runs/{run}/checkpoint", content=checkpoint.read_bytes()).status_code == 200
        assert c.patch(f"/api/runs/{run}", json={"group_id": GROUP}).status_code == 200
        bench = c.post("/api/benchmarks", json={"preset": "tiny", "device": "cpu", "batch_sizes": [2],
                                                "precisions": ["fp32"], "steps": 1, "warmup": 0}).json()["run"]["id"]
        assert c.post("/api/sweeps", json=SWEEP_BODY).json()["id"] == SWEEP
    public = AppServer(Home(home.path, slice_path, {"TINYGPT_API_TOKEN": TOKEN, "TINYGPT_PUBLIC_READ": "true"}))
    yield app, public, run, bench
    public.stop()
    app.stop()


def url_of(path: str, run: int, bench: int, victim: int | None = None, sweep: int = SWEEP) -> str:
    run_id = bench if path in BENCHMARK_PATHS else victim or run
    query = QUERY.get(path, "").format(run=run)
    return (path.replace("{run_id}", str(run_id)).replace("{sweep_id}", str(sweep)).replace("{group_id}", GROUP)
            .replace("{path:path}", "0/x/artifacts/model.pt") + (f"?{query}" if query else ""))


def status_of(client: httpx.Client, method: str, url: str, **kwargs: object) -> int:
    """The status only: streams (event streams, samples) are closed without being read."""
    with client.stream(method, url, **kwargs) as response:
        return response.status_code


def test_every_route_is_listed():
    paths = {p for _, p in ROUTES}
    assert {"/api/runs", "/api/runs/{run_id}/checkpoint", "/api/events", "/", "/runs/{run_id}", "/docs", "/redoc",
            "/openapi.json"} <= paths


@pytest.mark.parametrize("method, path", GUARDED)
def test_needs_the_token(site, method, path):
    app, _, run, bench = site
    with httpx.Client(base_url=app.url, timeout=30) as c:
        assert status_of(c, method, url_of(path, run, bench), json={}) == 401


@pytest.mark.parametrize("method, path", [r for r in GUARDED if r[0] == "GET"])
def test_reads_work_with_the_token(site, method, path):
    app, _, run, bench = site
    with httpx.Client(base_url=app.url, headers=BEARER, timeout=30) as c:
        assert status_of(c, method, url_of(path, run, bench)) == READ_STATUS.get(path, 200)


@pytest.mark.parametrize("method, path", [r for r in GUARDED if r[0] != "GET"])
def test_changes_pass_the_guard_with_the_token(site, method, path):
    """Not 401/403: what the change then says (201, 204, 422 for an empty body, ...) is the route's business."""
    app, _, run, bench = site
    with httpx.Client(base_url=app.url, headers=BEARER, timeout=30) as c:
        victim = c.post("/api/runs", json={"preset": "tiny", "device": "cpu", "steps": 2}).json()[0]["id"]
        sweep = c.post("/api/sweeps", json=SWEEP_BODY).json()["id"]  # a sweep to cancel or delete
        assert status_of(c, method, url_of(path, run, bench, victim, sweep), json={}) not in (401, 403)


@pytest.mark.parametrize("method, path", ROUTES)
def test_public_read_opens_reads_but_not_files_or_changes(site, method, path):
    _, public, run, bench = site
    with httpx.Client(base_url=public.url, timeout=30) as c:
        if path in OPEN:  # never the guard's refusal (a wrong login is the login form's own 401)
            assert "needs its API token" not in c.request(method, path).text
            return
        status = status_of(c, method, url_of(path, run, bench), json={})
    if method == "GET" and path not in PRIVATE_FILES | MODEL_QUERIES:
        assert status == READ_STATUS.get(path, 200)
    else:
        assert status == 401


@pytest.mark.parametrize("path", [p for m, p in GUARDED if m == "GET" and not p.endswith("/events")
                                  and p not in PRIVATE_FILES | MODEL_QUERIES])
def test_readers_never_see_a_webhook_url(site, path):
    """The public-read matrix: every page and API read, as a reader sees it, holds no webhook URL (a Slack or
    Discord URL is the key to post there); its host is shown, and token holders see the whole URL."""
    app, public, run, bench = site
    body = httpx.get(f"{public.url}{url_of(path, run, bench)}", timeout=30).text
    assert "secret-webhook-path" not in body
    if path in ("/api/runs/{run_id}", "/runs/{run_id}", "/api/sweeps/{sweep_id}", "/new"):
        assert "https://hooks.example.com/…" in body
        with httpx.Client(base_url=app.url, headers=BEARER, timeout=30) as c:
            assert HOOK in c.get(url_of(path, run, bench)).text


def test_static_assets_and_health_stay_open(site):
    app, _, _, _ = site
    plain = httpx.get(f"{app.url}/static/css/app.css", timeout=30)
    assert (plain.status_code, plain.headers["cache-control"]) == (200, "no-cache")  # revalidated (ETag)
    # what a page asks for is kept by the browser: our files with the static folder's version, vendored ones
    login = httpx.get(f"{app.url}/login", timeout=30).text
    versioned = re.search(r'href="(/static/css/app\.css\?v=[0-9a-f]{12})"', login).group(1)
    for path in (versioned, "/static/vendor/htmx.org-2.0.8/htmx.min.js"):
        kept = httpx.get(f"{app.url}{path}", timeout=30)
        assert (kept.status_code, kept.headers["cache-control"]) == (200, "public, max-age=31536000, immutable")
    assert httpx.get(f"{app.url}/healthz", timeout=30).json() == {"status": "ok", "version": __version__}
    assert httpx.get(f"{app.url}/login", timeout=30).status_code == 200
