"""What readers without the token see (``TINYGPT_PUBLIC_READ``): webhook URLs as scheme and host only, no
model answers unless ``TINYGPT_PUBLIC_SAMPLING``; and checkpoint loads bounded for everyone. In-process:
these are about requests and responses (the public-read matrix over every route is tests/test_access.py)."""

from __future__ import annotations

import os

TOKEN = "secrets-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
HOOK = "https://hooks.slack.com/services/T000/B000/XXXXsecretXXXX"
RUN = {"preset": "tiny", "device": "cpu", "precision": "fp32", "batch_size": 4, "steps": 5, "eval_every": 5}


def test_readers_see_scheme_and_host_and_token_holders_the_url(make_app):
    client = make_app(api_token=TOKEN, public_read=True)
    first = client.post("/api/runs", json={**RUN, "notify": {"urls": [HOOK]}}, headers=AUTH).json()[0]["id"]
    second = client.post("/api/runs", json={**RUN, "notify": {"urls": ["https://discord.com/api/webhooks/1/tok"]}},
                         headers=AUTH).json()[0]["id"]
    assert client.get(f"/api/runs/{first}").json()["config"]["notify"]["urls"] == ["https://hooks.slack.com/…"]
    assert client.get(f"/api/runs/{first}", headers=AUTH).json()["config"]["notify"]["urls"] == [HOOK]
    listed = client.get("/api/runs").json()["items"]
    assert [r["config"]["notify"]["urls"] for r in listed] == [["https://discord.com/…"], ["https://hooks.slack.com/…"]]
    compared = client.get("/api/compare", params={"ids": f"{first},{second}"}).json()
    assert compared["config_differences"]["notify"] == [
        {"events": compared["config_differences"]["notify"][0]["events"], "urls": ["https://hooks.slack.com/…"]},
        {"events": compared["config_differences"]["notify"][1]["events"], "urls": ["https://discord.com/…"]}]
    page = client.get(f"/runs/{first}").text
    assert "also to https://hooks.slack.com/…" in page and "XXXXsecretXXXX" not in page
    again = client.get("/new", params={"from": first}).text
    assert "https://hooks.slack.com/…" in again and "XXXXsecretXXXX" not in again
    assert HOOK in client.get("/new", params={"from": first}, headers=AUTH).text


def test_without_a_token_the_machine_owner_sees_everything(make_app):
    client = make_app()
    run = client.post("/api/runs", json={**RUN, "notify": {"urls": [HOOK]}}).json()[0]["id"]
    assert client.get(f"/api/runs/{run}").json()["config"]["notify"]["urls"] == [HOOK]


def test_readers_ask_a_model_only_when_the_operator_allows(make_app, imported_run, write_checkpoint, tmp_path):
    checkpoint = write_checkpoint(tmp_path / "best.pt")
    closed = make_app(api_token=TOKEN, public_read=True)
    run = imported_run(closed, checkpoint, headers=AUTH)
    assert closed.get(f"/api/runs/{run}/neighbors", params={"word": " the"}).status_code == 401
    assert closed.post(f"/api/runs/{run}/sample", json={"max_tokens": 2}).status_code == 401
    assert 'id="model-locked"' in closed.get(f"/runs/{run}").text
    assert closed.get(f"/api/runs/{run}/neighbors", params={"word": " the"}, headers=AUTH).status_code == 200
    assert 'id="sample-form"' in closed.get(f"/runs/{run}", headers=AUTH).text
    opened = make_app(api_token=TOKEN, public_read=True, public_sampling=True)
    run = imported_run(opened, checkpoint, headers=AUTH)
    assert len(opened.get(f"/api/runs/{run}/neighbors", params={"word": " the", "k": 3}).json()) == 3
    with opened.stream("POST", f"/api/runs/{run}/sample", json={"max_tokens": 2, "seed": 1}) as sample:
        assert sample.status_code == 200 and "event: end" in sample.read().decode()
    assert 'id="sample-form"' in opened.get(f"/runs/{run}").text


def test_checkpoint_loads_are_bounded_per_minute(make_app, imported_run, write_checkpoint, tmp_path):
    client = make_app(model_loads_per_minute=2)
    checkpoint = write_checkpoint(tmp_path / "best.pt")
    run = imported_run(client, checkpoint)
    stored = client.app.state.settings.runs_dir / str(run) / "best.pt"
    statuses = []
    for i in range(3):
        os.utime(stored, (1_000_000 + i, 1_000_000 + i))  # another version of the file: not the cached model
        statuses.append(client.get(f"/api/runs/{run}/neighbors", params={"word": " the"}))
        statuses.append(client.get(f"/api/runs/{run}/neighbors", params={"word": " and"}))  # cached: free
    assert [r.status_code for r in statuses] == [200, 200, 200, 200, 429, 429]
    message = statuses[-1].json()["detail"]
    assert message.startswith("too many models loaded in the last minute (limit 2); try again in ")
