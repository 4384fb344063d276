"""Guessing the token is not free: wrong credentials are counted per client address and answered 429 with a
growing ``Retry-After`` past ``TINYGPT_AUTH_FAILURES_ALLOWED``; another address is never slowed; a weak token is
refused at start; ``tinygpt token`` prints a fresh one. The counting itself at its unit, the routes in-process,
and one real ``tinygpt serve`` over loopback from two addresses."""

from __future__ import annotations

import logging
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from app.failed_auth import FORGET_AFTER_SEC, MAX_BLOCK_SEC, FailedAuth
from app.main import create_app
from app.security import WeakToken
from app.settings import Settings

from .service_helpers import Home, Serve, tinygpt_here

TOKEN = "failed-auth-test-token-0123456789"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- the count, at its unit --------------------------------------------------------------------------------------
def test_past_the_allowed_failures_an_address_waits_longer_after_each_further_one():
    clock = Clock()
    limits = FailedAuth(allowed=3, clock=clock)
    assert [limits.failed("10.0.0.9") for _ in range(3)] == [None, None, 1]
    assert (limits.retry_after("10.0.0.9"), limits.retry_after("10.0.0.8")) == (1, None)  # others untouched
    clock.now += 1.0
    assert limits.retry_after("10.0.0.9") is None
    assert [limits.failed("10.0.0.9") for _ in range(3)] == [2, 4, 8]  # counted even while refused: growing
    for _ in range(20):
        limits.failed("10.0.0.9")
    assert limits.retry_after("10.0.0.9") == MAX_BLOCK_SEC


def test_a_right_token_or_an_hour_without_failure_starts_the_count_afresh():
    clock = Clock()
    limits = FailedAuth(allowed=2, clock=clock)
    limits.failed("10.0.0.9")
    limits.succeeded("10.0.0.9")
    assert limits.failed("10.0.0.9") is None  # the first of a new count
    assert limits.failed("10.0.0.9") == 1
    clock.now += FORGET_AFTER_SEC + 1
    assert limits.retry_after("10.0.0.9") is None and limits.failed("10.0.0.9") is None


def test_a_failure_is_logged_with_the_address_never_the_guess(make_app, caplog):
    client = make_app(api_token=TOKEN)
    with caplog.at_level(logging.WARNING, logger="tinygpt.auth"):
        client.get("/api/runs", headers={"Authorization": "Bearer my-guess-1234"})
    assert [r.getMessage() for r in caplog.records if r.name == "tinygpt.auth"] == [
        "failed authentication from testclient (1 in a row)"]
    assert "my-guess" not in caplog.text


# -- the routes, in-process ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["bearer", "cookie", "login", "run token"])
def test_each_kind_of_wrong_credential_is_refused_429_past_the_limit(make_app, how):
    client = make_app(api_token=TOKEN, auth_failures_allowed=3)
    if how == "cookie":  # a session secret no login gave
        client.cookies.set("tinygpt_session", "f" * 43)

    def attempt() -> httpx.Response:
        if how in ("bearer", "cookie"):
            wrong = {"Authorization": "Bearer wrong-token-000000"} if how == "bearer" else {}
            return client.get("/api/runs", headers=wrong)
        if how == "login":
            return client.post("/login", data={"token": "wrong-token-000000", "next": "/"})
        forged = {"Authorization": "Bearer tgr-1-" + "a" * 43}  # a run token's form, not one it was given
        return client.post("/api/runs/1/report", json={}, headers=forged)

    assert [attempt().status_code for _ in range(3)] == [401, 401, 401]
    refused = attempt()
    assert (refused.status_code, refused.headers["Retry-After"]) == (429, "1")
    client.cookies.clear()
    right = client.get("/api/runs", headers={"Authorization": f"Bearer {TOKEN}"})
    assert right.status_code == 429  # while refused, nothing is checked: not even a right guess gets through
    other = TestClient(client.app, base_url="http://127.0.0.1", client=("10.0.0.2", 50000))
    assert other.get("/api/runs", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_the_login_form_says_when_to_try_again(make_app):
    client = make_app(api_token=TOKEN, auth_failures_allowed=2)
    assert "wrong token</" in client.post("/login", data={"token": "nope-nope-nope-nope"}).text
    second = client.post("/login", data={"token": "nope-nope-nope-nope"})
    assert second.status_code == 401 and "wrong token; try again in 1 s" in second.text
    third = client.post("/login", data={"token": TOKEN})
    assert third.status_code == 429 and third.headers["Retry-After"] == "1"
    assert "too many failed authentications from testclient: try again in 1 s" in third.text


def test_requests_without_any_credential_are_not_counted(make_app):
    client = make_app(api_token=TOKEN, auth_failures_allowed=1)
    assert [client.get("/api/runs").status_code for _ in range(5)] == [401] * 5
    assert client.get("/api/runs", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


# -- the token itself ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("token, problem", [
    ("s3cret", "6 characters, at least 16 needed"),
    ("a" * 15, "15 characters, at least 16 needed"),
    ("passwordpassword", "it is a common token"),
    ("abababababababababab", "it is a common token"),
])
def test_a_weak_token_is_refused_at_start_naming_the_setting(tmp_path, token, problem):
    message = f"TINYGPT_API_TOKEN is too easy to guess: {problem}; `tinygpt token` prints a fresh random one"
    with pytest.raises(WeakToken) as refused:
        create_app(Settings(home=tmp_path, api_token=token))
    assert str(refused.value) == message
    done = tinygpt_here("app", env={"TINYGPT_HOME": str(tmp_path), "TINYGPT_API_TOKEN": token})
    assert (done.returncode, done.stderr) == (2, f"tinygpt: error: {message}\n")


def test_tinygpt_token_prints_a_fresh_random_token(tmp_path):
    printed = {tinygpt_here("token", env={"TINYGPT_HOME": str(tmp_path)}, check=True).stdout for _ in range(2)}
    assert len(printed) == 2  # fresh each time
    for out in printed:
        token = out.strip()
        assert len(token) == 43 and out.endswith("\n")
        create_app(Settings(home=tmp_path, api_token=token))  # strong enough for the app


# -- a real `tinygpt serve`, two client addresses -----------------------------------------------------------------
def test_a_real_serve_refuses_a_guesser_and_serves_everyone_else(tmp_path, slice_path):
    home = Home(tmp_path, slice_path, {"TINYGPT_API_TOKEN": TOKEN, "TINYGPT_AUTH_FAILURES_ALLOWED": "3"})
    serve = Serve(home)
    try:
        guesser = httpx.Client(base_url=serve.url, timeout=30)
        other = httpx.Client(base_url=serve.url, timeout=30, transport=httpx.HTTPTransport(local_address="127.0.0.2"))
        guesses = [guesser.get("/api/runs", headers={"Authorization": f"Bearer guess-{i:012d}"}) for i in range(4)]
        assert [g.status_code for g in guesses] == [401, 401, 401, 429]
        wait = int(guesses[-1].headers["Retry-After"])
        assert wait == 1 and guesses[-1].json() == {
            "detail": "too many failed authentications from 127.0.0.1: try again in 1 s"}
        assert other.get("/api/runs", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert guesser.get("/api/runs", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 429
        time.sleep(wait + 0.1)
        assert guesser.get("/api/runs", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        # the right token ended the count: the next wrong one is the first of a new one
        assert guesser.get("/api/runs", headers={"Authorization": "Bearer guess-again-0000"}).status_code == 401
        assert "failed authentication from 127.0.0.1 (3 in a row); refused for 1 s" in serve.output()
        assert "guess-" not in serve.output()
    finally:
        serve.stop()
