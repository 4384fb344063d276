"""Safe by default: the API token, browser sessions, cross-site and host checks, request limits, forwarded
headers, stream caps, strict input.

What is about the server (binding, uvicorn's forwarded headers, bodies cut off while they stream) talks to a
real app process over loopback; request/response behaviour to an app built in the test process (``make_app``).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from tinygpt import __version__

from .service_helpers import ROOT, AppServer, Home, free_port

TOKEN = "correct-horse-battery-staple-42"
RUN = {"preset": "tiny", "device": "cpu", "precision": "fp32", "batch_size": 4, "steps": 5, "eval_every": 5}


@pytest.fixture(scope="module")
def guarded(tmp_path_factory, slice_path):
    """An app started with an API token and small limits (no worker: nothing here needs to train), its access
    log on (where a token would show if a request carried it in its line)."""
    path = tmp_path_factory.mktemp("guarded")
    home = Home(path, slice_path, {"TINYGPT_API_TOKEN": TOKEN, "TINYGPT_MAX_REQUEST_KB": "64",
                                   "TINYGPT_MAX_UPLOAD_MB": "0.5", "TINYGPT_MAX_STREAMS_PER_CLIENT": "2",
                                   "TINYGPT_ACCESS_LOG": "true"})
    app = AppServer(home)
    yield app
    app.stop()


def bearer(token: str = TOKEN) -> dict:
    return {"Authorization": f"Bearer {token}"}


# -- binding -----------------------------------------------------------------------------------
def test_app_refuses_another_address_without_a_token(tmp_path, slice_path):
    env = Home(tmp_path, slice_path).env()
    env.pop("TINYGPT_API_TOKEN", None)
    result = subprocess.run([sys.executable, "-m", "app.cli", "app", "--host", "0.0.0.0", "--port", str(free_port())],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == ("tinygpt: error: binding to 0.0.0.0 needs an API token: set TINYGPT_API_TOKEN "
                                     "(README, Security), or bind to 127.0.0.1")


# -- the token -----------------------------------------------------------------------------------
def test_state_changes_need_the_token(guarded):
    with guarded.client() as c:
        missing = c.post("/api/runs", json=RUN)
        assert missing.status_code == 401
        assert missing.headers["www-authenticate"] == "Bearer"
        assert missing.json() == {"detail": "this dashboard needs its API token: send `Authorization: Bearer TOKEN`, "
                                            "or log in at /login"}
        assert c.post("/api/runs", json=RUN, headers=bearer("wrong-" + TOKEN)).status_code == 401
        assert c.post("/api/runs", json=RUN, headers=bearer(TOKEN[:-1])).status_code == 401
        created = c.post("/api/runs", json=RUN, headers=bearer())
        assert created.status_code == 201, created.text
        run_id = created.json()[0]["id"]
        for method, url in [("POST", f"/api/runs/{run_id}/cancel"), ("PATCH", f"/api/runs/{run_id}"),
                            ("DELETE", f"/api/runs/{run_id}"), ("POST", f"/api/runs/{run_id}/sample"),
                            ("POST", "/api/benchmarks"), ("POST", "/api/datasets"), ("POST", "/new")]:
            assert c.request(method, url, json={}).status_code == 401, (method, url)
        # reading needs it too (tests/test_access.py: every route); the health check stays open
        assert c.get(f"/api/runs/{run_id}").status_code == 401
        assert c.get(f"/api/runs/{run_id}", headers=bearer()).json()["status"] == "queued"
        assert c.get("/healthz").json() == {"status": "ok", "version": __version__}


def test_event_streams_need_the_token(guarded):
    with guarded.client() as c:
        run_id = c.post("/api/runs", json=RUN, headers=bearer()).json()[0]["id"]
    for path in ["/api/events", f"/api/runs/{run_id}/events"]:
        assert httpx.get(f"{guarded.url}{path}", timeout=10).status_code == 401
        with httpx.stream("GET", f"{guarded.url}{path}", headers=bearer(), timeout=10) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")


def test_login_sets_an_httponly_strict_cookie_that_is_not_the_token(guarded):
    with httpx.Client(base_url=guarded.url, timeout=30) as c:
        page = c.get("/")
        assert page.status_code == 401 and 'name="token"' in page.text and 'value="/"' in page.text
        wrong = c.post("/login", data={"token": "nope", "next": "/new"})
        assert wrong.status_code == 401 and "wrong token" in wrong.text and "tinygpt_session" not in wrong.headers.get(
            "set-cookie", "")
        ok = c.post("/login", data={"token": TOKEN, "next": "/new"})
        assert ok.status_code == 303 and ok.headers["location"] == "/new"
        cookie = ok.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
        assert TOKEN not in cookie
        assert c.get("/new").status_code == 200
        assert c.post("/api/runs", json=RUN).status_code == 201  # the cookie works for the API too
        assert c.post("/logout").status_code == 303
        assert c.get("/new").status_code == 401


@pytest.mark.parametrize("target", ["//evil.example/x", "https://evil.example/", "/\\evil.example", ""])
def test_login_never_redirects_off_site(guarded, target):
    response = httpx.post(f"{guarded.url}/login", data={"token": TOKEN, "next": target}, timeout=30)
    assert response.status_code == 303 and response.headers["location"] == "/"


def test_the_token_is_never_logged(guarded):
    with guarded.client() as c:
        c.post("/api/runs", json=RUN, headers=bearer())
        c.post("/login", data={"token": TOKEN})
        c.post("/login", data={"token": TOKEN + "x"})
    assert "POST /login" in guarded.output()
    assert TOKEN not in guarded.output()


# -- cross-site requests and host names ---------------------------------------------------------
@pytest.mark.parametrize("headers", [
    {"Origin": "https://evil.example"},
    {"Origin": "null"},
    {"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
    {"Sec-Fetch-Site": "same-site"},
])
def test_cross_site_posts_are_refused_even_with_the_token(guarded, headers):
    with guarded.client() as c:
        for url in ["/new", "/api/runs", "/login"]:
            response = c.post(url, json=RUN, headers={**bearer(), **headers})
            assert response.status_code == 403, url
            assert "cross-site request refused" in response.text


def test_same_origin_posts_pass(guarded):
    with guarded.client() as c:
        host = guarded.url.removeprefix("http://")
        response = c.post("/api/runs", json=RUN, headers={**bearer(), "Origin": guarded.url, "Host": host,
                                                             "Sec-Fetch-Site": "same-origin"})
        assert response.status_code == 201


def test_other_host_names_are_refused_on_loopback(guarded):
    """DNS rebinding: a page on evil.example resolving to 127.0.0.1 must not reach the app."""
    response = httpx.get(f"{guarded.url}/api/runs", headers={"Host": "evil.example"}, timeout=10)
    assert response.status_code == 400 and response.text == "Invalid host header"
    assert httpx.get(f"http://localhost:{guarded.port}/healthz", timeout=10).status_code == 200


# -- limits ---------------------------------------------------------------------------------------
def test_a_body_over_the_limit_is_refused_before_it_is_read(guarded):
    with guarded.client() as c:
        response = c.post("/api/runs", json={**RUN, "name": "x" * 70_000}, headers=bearer())
        assert response.status_code == 413
        assert response.json()["detail"] == [{"loc": ["body", "body"], "msg": "request body is larger than the limit "
                                               "of 64 KB", "type": "value_error"}]
        upload = c.post("/api/datasets", data={"name": "big"}, files={"file": ("big.txt", b"a" * 600_000)},
                        headers=bearer())
        assert upload.status_code == 413
        assert upload.json()["detail"][0]["msg"] == "file is larger than the upload limit of 0.5 MB"


def test_an_upload_without_a_declared_size_is_cut_off_while_streaming(guarded):
    """Chunked (no Content-Length): the app stops reading at the limit instead of storing it all."""
    sent = 0

    def body():
        nonlocal sent
        boundary = b"--b\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nbig\r\n" \
                   b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.txt\"\r\n\r\n"
        yield boundary
        chunk = b"a" * 65_536
        for _ in range(3_000):  # 196 MB if nobody stopped it
            sent += len(chunk)
            yield chunk
        yield b"\r\n--b--\r\n"

    headers = {**bearer(), "Content-Type": "multipart/form-data; boundary=b"}
    try:
        response = httpx.post(f"{guarded.url}/api/datasets", content=body(), headers=headers, timeout=60)
        assert response.status_code == 413
        assert response.json()["detail"][0]["msg"] == "file is larger than the upload limit of 0.5 MB"
    except httpx.TransportError:
        pass  # the app closed the connection while the client was still sending: also a refusal
    assert sent < 50_000_000, f"the app read {sent:,} bytes before refusing"
    with guarded.client() as c:
        assert "big" not in [d["name"] for d in c.get("/api/datasets", headers=bearer()).json()]


@contextlib.contextmanager
def two_open_streams(url: str, *headers: dict) -> Iterator[None]:
    """Two event streams held open at once, with the given headers. A stream closed by an earlier test
    holds its slot until the app sees the disconnect (a moment later): try again until both open."""
    deadline = time.monotonic() + 10
    while True:
        with contextlib.ExitStack() as stack:
            codes = [stack.enter_context(httpx.stream("GET", url, headers=h, timeout=10)).status_code
                     for h in headers]
            if codes == [200, 200]:
                yield
                return
        assert time.monotonic() < deadline, f"the slots never came back: {codes}"
        time.sleep(0.1)


def test_event_streams_per_client_are_capped(guarded):
    url = f"{guarded.url}/api/events"
    with two_open_streams(url, bearer(), bearer()):
        third = httpx.get(url, headers=bearer(), timeout=10)
        assert third.status_code == 429
        assert third.json() == {"detail": "too many open event streams from 127.0.0.1 (limit 2); close some first"}
    # both closed: the slots come back (give the app a moment to see the disconnects)
    with two_open_streams(url, bearer(), bearer()):
        pass


def test_forwarded_for_is_ignored_from_an_untrusted_address(guarded):
    """The per-client cap counts the connection's address: a local client claiming other addresses in
    X-Forwarded-For (trusted by uvicorn from 127.0.0.1 unless told otherwise) gets no more streams."""
    url = f"{guarded.url}/api/events"
    with two_open_streams(url, {**bearer(), "X-Forwarded-For": "203.0.113.1"},
                          {**bearer(), "X-Forwarded-For": "203.0.113.2"}):
        third = httpx.get(url, headers={**bearer(), "X-Forwarded-For": "203.0.113.3"}, timeout=10)
        assert third.status_code == 429
        assert third.json() == {"detail": "too many open event streams from 127.0.0.1 (limit 2); close some first"}


def test_the_whole_app_caps_its_open_streams():
    from app.api.events import StreamCounter
    from app.errors import TooManyRequests

    counter = StreamCounter()
    counter.acquire("203.0.113.1", 5, 3)
    counter.acquire("203.0.113.2", 5, 3)
    counter.acquire("203.0.113.3", 5, 3)
    with pytest.raises(TooManyRequests) as refused:
        counter.acquire("203.0.113.4", 5, 3)
    assert refused.value.message == "too many open event streams on this dashboard (limit 3); try again later"
    counter.release("203.0.113.1")
    counter.acquire("203.0.113.4", 5, 3)
    assert counter.total == 3 and counter.open == {"203.0.113.2": 1, "203.0.113.3": 1, "203.0.113.4": 1}


# -- browser sessions ---------------------------------------------------------------------------------------
def log_in(client, token: str = TOKEN) -> str:
    response = client.post("/login", data={"token": token, "next": "/"}, follow_redirects=False)
    assert response.status_code == 303, response.text
    return response.cookies["tinygpt_session"]


def test_a_session_ends_at_logout_even_for_a_copy_of_its_cookie(make_app):
    client = make_app(api_token=TOKEN)
    cookie = log_in(client)
    assert TOKEN not in cookie and len(cookie) >= 40
    copy = {"Cookie": f"tinygpt_session={cookie}"}
    assert client.get("/api/runs", headers=copy).status_code == 200
    assert client.post("/logout", follow_redirects=False).status_code == 303
    client.cookies.clear()
    assert client.get("/api/runs", headers=copy).status_code == 401


def test_a_session_expires(make_app):
    client = make_app(api_token=TOKEN, session_days=1 / 86_400)  # one second
    cookie = log_in(client)
    client.cookies.clear()
    assert client.get("/api/runs", headers={"Cookie": f"tinygpt_session={cookie}"}).status_code == 200
    time.sleep(1.2)
    assert client.get("/api/runs", headers={"Cookie": f"tinygpt_session={cookie}"}).status_code == 401


def test_a_new_token_ends_every_session(make_app, tmp_path):
    home = tmp_path / "shared-home"
    cookie = log_in(make_app(api_token=TOKEN, home=home))
    rotated = make_app(api_token="a-new-token-9876543210", home=home)
    assert rotated.get("/api/runs", headers={"Cookie": f"tinygpt_session={cookie}"}).status_code == 401
    same = make_app(api_token=TOKEN, home=home)
    assert same.get("/api/runs", headers={"Cookie": f"tinygpt_session={cookie}"}).status_code == 200


def test_the_old_kind_of_cookie_is_refused(make_app):
    """Before sessions the cookie was a fixed HMAC of the token: it worked forever, whatever /logout did."""
    import hashlib
    import hmac

    client = make_app(api_token=TOKEN)
    old = hmac.new(TOKEN.encode(), b"tinygpt browser session", hashlib.sha256).hexdigest()
    assert client.get("/api/runs", headers={"Cookie": f"tinygpt_session={old}"}).status_code == 401


# -- smaller ones -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/api/events", "/api/runs/1/events", "/api/sweeps/1/events"])
def test_a_stream_cursor_past_64_bits_is_a_422(make_app, path):
    client = make_app()
    client.post("/api/runs", json=RUN)
    client.post("/api/sweeps", json={"method": "grid", "parameters": {"lr": {"values": [0.01]}}, "base": RUN})
    by_query = client.get(path, params={"after": 2**64})
    assert by_query.status_code == 422 and by_query.json()["detail"][0]["loc"] == ["query", "after"]
    by_header = client.get(path, headers={"Last-Event-ID": str(2**64)})
    assert by_header.status_code == 422
    assert by_header.json()["detail"][0]["msg"] == f"Last-Event-ID must be at most {2**63 - 1}"


def test_a_dataset_name_with_a_newline_is_refused(make_app):
    client = make_app()
    response = client.post("/api/datasets", data={"name": "corpus\n"}, files={"file": ("c.txt", b"some text " * 100)})
    assert response.status_code == 422, response.text
    assert "corpus\n" not in [d["name"] for d in client.get("/api/datasets").json()]


def test_a_run_that_cannot_fit_the_machine_is_refused_with_its_estimate(make_app):
    from app.services.devices import memory_limit_mib

    client = make_app()
    response = client.post("/api/runs", json={**RUN, "preset": "holmes", "batch_size": 4096, "d_model": 1024,
                                              "n_layers": 24, "context": 1024})
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    limit, what, _ = memory_limit_mib("cpu", client.app.state.settings)
    assert error["loc"] == ["body", "batch_size"]
    assert error["msg"].startswith("this run needs at least about ") and f"but has {what}: lower batch_size" in error["msg"]
    capped = make_app(job_memory_mb=1000)
    refused = capped.post("/api/runs", json={**RUN, "batch_size": 1024}).json()["detail"][0]["msg"]
    assert "but has TINYGPT_JOB_MEMORY_MB (1000 MB a process)" in refused
    assert capped.post("/api/runs", json={**RUN, "batch_size": 8}).status_code == 201


def test_unknown_fields_are_refused_naming_the_closest(make_app):
    client = make_app()
    guess = client.post("/api/runs", json={"preset": "tiny", "learning_rate": 0.1})
    assert guess.status_code == 422
    assert guess.json()["detail"] == [{"type": "extra_forbidden", "loc": ["body", "learning_rate"], "input": 0.1,
                                       "msg": "unknown field 'learning_rate': did you mean 'lr'?"}]
    seeds = client.post("/api/runs", json={"preset": "tiny", "sead": 3}).json()["detail"][0]
    assert (seeds["loc"], seeds["msg"]) == (["body", "sead"], "unknown field 'sead': did you mean 'seed'?")
    base = client.post("/api/sweeps", json={"method": "grid", "parameters": {"lr": {"values": [0.01]}},
                                            "base": {"preset": "tiny", "n_layer": 2}}).json()["detail"][0]
    assert (base["loc"], base["msg"]) == (["body", "base", "n_layer"], "unknown field 'n_layer': did you mean 'n_layers'?")
    patch = client.patch("/api/runs/1", json={"nmae": "x"}).json()["detail"][0]
    assert patch["msg"] == "unknown field 'nmae': did you mean 'name'?"


def test_tinygpt_train_config_files_refuse_unknown_options(tmp_path, capsys):
    from tinygpt.cli import main

    config = tmp_path / "options.json"
    config.write_text('{"preset": "tiny", "learning_rate": 0.1, "n_layer": 2}')
    assert main(["train", "--out", str(tmp_path / "run"), "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err == ("tinygpt train: error: unknown training option 'learning_rate': did you mean 'lr'?; unknown "
                   "training option 'n_layer': did you mean 'n_layers'?\n")
