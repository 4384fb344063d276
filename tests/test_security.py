"""Safe by default: the API token, the login cookie, cross-site and host checks, request limits.

Each test talks to a real app process (uvicorn) over loopback.
"""

from __future__ import annotations

import subprocess
import sys
import threading

import httpx
import pytest

from .service_helpers import ROOT, AppServer, Home, free_port

TOKEN = "correct-horse-battery-staple-42"
RUN = {"preset": "tiny", "device": "cpu", "precision": "fp32", "batch_size": 4, "steps": 5, "eval_every": 5}


@pytest.fixture(scope="module")
def guarded(tmp_path_factory, slice_path):
    """An app started with an API token and small limits (no worker: nothing here needs to train)."""
    path = tmp_path_factory.mktemp("guarded")
    home = Home(path, slice_path, {"TINYGPT_API_TOKEN": TOKEN, "TINYGPT_MAX_REQUEST_KB": "64",
                                   "TINYGPT_MAX_UPLOAD_MB": "0.5", "TINYGPT_MAX_STREAMS_PER_CLIENT": "2"})
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
        assert c.get("/healthz").json() == {"status": "ok"}


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


def test_event_streams_per_client_are_capped(guarded):
    url = f"{guarded.url}/api/events"
    first = httpx.stream("GET", url, headers=bearer(), timeout=10)
    second = httpx.stream("GET", url, headers=bearer(), timeout=10)
    with first as a, second as b:
        assert a.status_code == b.status_code == 200
        third = httpx.get(url, headers=bearer(), timeout=10)
        assert third.status_code == 429
        assert third.json() == {"detail": "too many open event streams from 127.0.0.1 (limit 2); close some first"}
    # both closed: the slots come back (give the app a moment to see the disconnects)
    ok = threading.Event()
    for _ in range(50):
        with httpx.stream("GET", url, headers=bearer(), timeout=10) as again:
            if again.status_code == 200:
                ok.set()
                break
        threading.Event().wait(0.1)
    assert ok.is_set()
