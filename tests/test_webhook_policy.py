"""Webhooks go to public receivers only (``app/webhook_policy.py``): refused at submission when the URL
shows an inside address, and at delivery on the address the connection actually uses. The deliveries
here go through the worker's real notifier to real HTTP receivers on loopback, which must never hear a
refused one."""

from __future__ import annotations

import ipaddress
import socket
import threading

import httpx
import pytest

from app.db import init_db, session_scope
from app.models import Event, EventType, Notify, WebhookDelivery
from app.settings import Settings
from app.webhook_policy import GuardedTransport, ReceiverPolicy, ReceiverRefused, address_problem
from worker.notifier import Notifier

from .webhook_receiver import Receiver

RUN = {"preset": "tiny", "device": "cpu", "precision": "fp32", "batch_size": 4, "steps": 5, "eval_every": 5}


@pytest.mark.parametrize("address, problem", [
    ("127.0.0.1", "a loopback address"), ("127.8.9.10", "a loopback address"), ("::1", "a loopback address"),
    ("::ffff:127.0.0.1", "a loopback address"), ("0.0.0.0", "an unspecified address"), ("::", "an unspecified address"),
    ("169.254.169.254", "a link-local address"), ("fe80::1", "a link-local address"),
    ("224.0.0.251", "a multicast address"), ("ff02::1", "a multicast address"),
    ("10.1.2.3", "a private address"), ("172.16.0.1", "a private address"), ("192.168.1.1", "a private address"),
    ("fc00::1", "a private address"), ("::ffff:10.0.0.1", "a private address"),
    ("240.0.0.1", "a private address"), ("100.64.0.1", "not a public address"),
    ("8.8.8.8", None), ("2001:4860:4860::8888", None), ("::ffff:8.8.8.8", None),
])
def test_every_kind_of_inside_address_is_named(address, problem):
    assert address_problem(ipaddress.ip_address(address)) == problem


@pytest.mark.parametrize("written", ["http://2130706433/hook", "http://0177.0.0.1/hook", "http://0x7f.1/hook",
                                     "http://127.1/hook", "http://[::ffff:127.0.0.1]/hook", "http://[::1]:8000/hook",
                                     "http://LOCALHOST:8000/hook", "http://api.localhost/hook",
                                     "https://169.254.169.254/latest/meta-data"])
def test_inside_addresses_in_any_form_are_refused_at_submission(make_app, written):
    client = make_app()
    response = client.post("/api/runs", json={**RUN, "notify": {"urls": [written]}})
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "notify", "urls", "0"]
    assert error["msg"].endswith(": webhooks go to public receivers (allow a local one with TINYGPT_WEBHOOK_ALLOW)")
    assert error["msg"].split(" is ")[1].split(":")[0] in ("a loopback address", "a loopback name",
                                                           "a link-local address")


def test_policies_for_a_runs_own_urls(make_app):
    public = {**RUN, "notify": {"urls": ["https://hooks.example.com/services/x"]}}
    lan = {**RUN, "notify": {"urls": ["http://10.0.0.5:9000/hook"]}}
    default = make_app()
    assert default.post("/api/runs", json=public).status_code == 201
    assert default.post("/api/runs", json=lan).status_code == 422
    allowed = make_app(webhook_allow=["10.0.0.0/24"])
    assert allowed.post("/api/runs", json=lan).status_code == 201
    only_listed = make_app(webhook_allow=["hooks.lan"], run_webhooks="allow-list")
    refused = only_listed.post("/api/runs", json=public).json()["detail"][0]
    assert refused["msg"] == "hooks.example.com is not on this dashboard's webhook allow-list (TINYGPT_WEBHOOK_ALLOW)"
    assert only_listed.post("/api/runs", json={**RUN, "notify": {"urls": ["http://hooks.lan/x"]}}).status_code == 201
    off = make_app(run_webhooks="off")
    assert off.post("/api/runs", json=public).json()["detail"][0]["msg"] == (
        "this dashboard takes no per-run webhook URLs (TINYGPT_RUN_WEBHOOKS=off)")
    assert off.post("/api/runs", json={**RUN, "notify": {"events": ["failed"]}}).status_code == 201


def test_the_operators_webhooks_follow_the_same_rules(monkeypatch):
    from app.settings import SettingsError, get_settings

    monkeypatch.setenv("TINYGPT_WEBHOOK_URLS", '["http://127.0.0.1:5432/"]')
    get_settings.cache_clear()
    with pytest.raises(SettingsError) as refused:
        get_settings()
    assert str(refused.value) == ("TINYGPT_WEBHOOK_URLS: http://127.0.0.1:5432/: 127.0.0.1 is a loopback address: "
                                  "webhooks go to public receivers (allow a local one with TINYGPT_WEBHOOK_ALLOW)")
    monkeypatch.setenv("TINYGPT_WEBHOOK_ALLOW", '["127.0.0.1/32"]')
    get_settings.cache_clear()
    assert get_settings().receiver_policy.allows_address(ipaddress.ip_address("127.0.0.1"))
    monkeypatch.setenv("TINYGPT_WEBHOOK_ALLOW", '["not a host/or range"]')
    get_settings.cache_clear()
    with pytest.raises(SettingsError, match="^TINYGPT_WEBHOOK_ALLOW: .*an allow-list entry is a host name or an "
                                            "address range"):
        get_settings()
    get_settings.cache_clear()


# -- at delivery: the address the connection uses ---------------------------------------------------------
@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.stop()


def resolving(monkeypatch, answers: dict[str, list[str]]) -> list[str]:
    """Names resolved as ``answers`` says, each lookup taking the next answer (the last one repeats): a DNS
    server that changes its mind. Returns the names looked up, in order."""
    real = socket.getaddrinfo
    asked: list[str] = []

    def getaddrinfo(host, port, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if host not in answers:
            return real(host, port, *args, **kwargs)
        asked.append(host)
        address = answers[host][min(asked.count(host), len(answers[host])) - 1]
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


def deliver(settings: Settings, url: str) -> WebhookDelivery:
    """One alert to ``url`` through the worker's notifier (a real database, a real HTTP client)."""
    init_db(settings)
    with session_scope(settings) as s:
        event = Event(type=EventType.alert, data={"kind": "failed", "message": "m", "subject": "run 1", "url": "u"})
        s.add(event)
        s.flush()
        s.add(WebhookDelivery(event_id=event.id, url=url))
    Notifier(settings, threading.Event()).send_due()
    with session_scope(settings) as s:
        return s.exec(WebhookDelivery.__table__.select()).one()  # type: ignore[attr-defined]


def test_a_name_that_resolves_to_loopback_is_never_connected_to(tmp_path, receiver):
    delivery = deliver(Settings(home=tmp_path), f"http://localhost:{receiver.port}/hook")
    assert delivery.state == "failed" and delivery.attempts == 1
    assert delivery.last_error == ("refused: localhost is a loopback name: webhooks go to public receivers (allow a "
                                   "local one with TINYGPT_WEBHOOK_ALLOW)")
    assert receiver.posts == []


def test_a_public_looking_name_that_resolves_inside_is_refused_when_sent(tmp_path, receiver, monkeypatch):
    resolving(monkeypatch, {"hooks.example.test": ["127.0.0.1"]})
    delivery = deliver(Settings(home=tmp_path), f"http://hooks.example.test:{receiver.port}/hook")
    assert delivery.state == "failed"
    assert delivery.last_error == ("refused: hooks.example.test resolves to 127.0.0.1 (a loopback address): webhooks "
                                   "go to public receivers (allow a local one with TINYGPT_WEBHOOK_ALLOW)")
    assert receiver.posts == []
    allowed = deliver(Settings(home=tmp_path / "allowed", webhook_allow=["hooks.example.test"]),
                      f"http://hooks.example.test:{receiver.port}/hook")
    assert allowed.state == "sent" and [p["path"] for p in receiver.posts] == ["/hook"]


def test_a_name_that_changes_its_answer_is_connected_to_where_it_was_checked(receiver, monkeypatch):
    """DNS rebinding: a first lookup answers an allowed address, later ones another. The connection goes to
    the address that was checked; a check-then-connect-by-name client would reach the other one."""
    other = Receiver(host="127.0.0.3", port=receiver.port)
    try:
        asked = resolving(monkeypatch, {"rebind.example.test": ["127.0.0.1", "127.0.0.3"]})
        policy = ReceiverPolicy.of(["127.0.0.1/32"])
        with httpx.Client(transport=GuardedTransport(policy)) as client:
            assert client.post(f"http://rebind.example.test:{receiver.port}/hook", json={}).status_code == 200
            with pytest.raises(ReceiverRefused, match=r"^rebind.example.test resolves to 127.0.0.3 \(a loopback"):
                client.post(f"http://rebind.example.test:{receiver.port}/again", json={}, headers={"Connection": "close"})
        assert asked == ["rebind.example.test", "rebind.example.test"]
        assert [p["path"] for p in receiver.posts] == ["/hook"] and other.posts == []
    finally:
        other.stop()


def test_pydantic_normalises_the_other_forms_before_they_are_checked():
    urls = Notify.model_validate({"urls": ["http://2130706433/", "http://0x7f.0.0.1/", "http://[::ffff:7f00:1]/"]}).urls
    assert [u.host for u in urls] == ["127.0.0.1", "127.0.0.1", "[::ffff:7f00:1]"]
    policy = ReceiverPolicy.of([])
    assert all(policy.submission_problem(str(u), per_run=True) for u in urls)
