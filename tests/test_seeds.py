"""Runs repeated over seeds: ``POST /api/runs`` with ``seeds`` (a count or a list) and the new-run form's Seeds
field make one run per seed (and device), one group, each with its own seed (in-process)."""

from __future__ import annotations

import pytest

RUN = {"preset": "tiny", "device": "cpu", "precision": "fp32", "batch_size": 4, "steps": 5, "eval_every": 5}


@pytest.mark.parametrize("seeds, expected", [([1, 2, 3], [1, 2, 3]), (2, [5, 6])])
def test_seeds_make_one_run_each_in_one_group(make_app, seeds, expected):
    client = make_app()
    response = client.post("/api/runs", json={**RUN, "seed": 5, "seeds": seeds, "name": "rep"})
    assert response.status_code == 201, response.text
    runs = response.json()
    assert [r["config"]["seed"] for r in runs] == expected
    assert [r["name"] for r in runs] == [f"rep [seed {s}]" for s in expected]
    assert len({r["group_id"] for r in runs}) == 1 and runs[0]["group_id"]
    assert all("seeds" not in r["config"] for r in runs)  # a run has its seed; the repetition is the group's
    listed = client.get("/api/runs", params={"group": runs[0]["group_id"]}).json()["items"]
    assert sorted(r["id"] for r in listed) == sorted(r["id"] for r in runs)


def test_seeds_times_devices(make_app):
    runs = make_app().post("/api/runs", json={**RUN, "device": ["cpu", "cpu"], "seeds": [7, 8]}).json()
    assert [(r["requested_device"], r["config"]["seed"]) for r in runs] == [("cpu", 7), ("cpu", 8), ("cpu", 7),
                                                                            ("cpu", 8)]


@pytest.mark.parametrize("seeds, message", [
    ([], "Value error, give 1 to 32 seeds, got 0"),
    ([1, 1], "Value error, each seed once: the same seed twice makes the same run"),
    (0, "Value error, a count of seeds must be 1 to 32, got 0"),
    ([-1], "Value error, seeds must be in [0, 9223372036854775807]"),
])
def test_bad_seeds_are_refused_naming_the_field(make_app, seeds, message):
    response = make_app().post("/api/runs", json={**RUN, "seeds": seeds})
    assert response.status_code == 422
    error = response.json()["detail"][0]
    assert (error["loc"][1], error["msg"]) == ("seeds", message)


def test_too_many_runs_at_once_are_refused(make_app):
    response = make_app().post("/api/runs", json={**RUN, "device": ["cpu"] * 4, "seeds": 9})
    assert response.status_code == 422
    assert response.json()["detail"][0]["msg"] == "Value error, 4 devices x 9 seeds make 36 runs; at most 32 at once"


def test_the_form_repeats_a_run_over_seeds(make_app):
    client = make_app()
    form = {"preset": "tiny", "dataset": "holmes", "device": "cpu", "precision": "fp32", "steps": "5",
            "batch_size": "4", "eval_every": "5", "seed": "3", "seeds": "1, 4"}
    response = client.post("/new", data=form)
    assert response.status_code == 200, response.text
    ids = response.headers["HX-Redirect"].split("ids=")[1]
    runs = [client.get(f"/api/runs/{i}").json() for i in ids.split(",")]
    assert [r["config"]["seed"] for r in runs] == [1, 4]
    bad = client.post("/new", data={**form, "seeds": "a few"})
    assert bad.status_code == 422 and "seeds" in bad.text


def test_two_more_seeds_join_the_runs_group_with_the_next_seeds(make_app):
    client = make_app()
    first = client.post("/api/runs", json={**RUN, "seed": 10, "name": "base"}).json()[0]
    assert first["group_id"] is None
    more = client.post(f"/api/runs/{first['id']}/repeat", json={"seeds": 2})
    assert more.status_code == 201, more.text
    runs = more.json()
    assert [(r["name"], r["config"]["seed"]) for r in runs] == [("base [seed 11]", 11), ("base [seed 12]", 12)]
    group = client.get(f"/api/runs/{first['id']}").json()["group_id"]
    assert group and {r["group_id"] for r in runs} == {group}
    again = client.post(f"/api/runs/{runs[1]['id']}/repeat", json={"seeds": 1}).json()
    assert [(r["name"], r["config"]["seed"], r["group_id"]) for r in again] == [("base [seed 13]", 13, group)]
    assert client.post(f"/api/runs/{first['id']}/repeat", json={"seeds": 0}).status_code == 422
    assert client.post(f"/api/runs/{first['id']}/repeat", json={"count": 2}).json()["detail"][0]["msg"] \
        .startswith("unknown field 'count'")


def test_an_imported_run_is_not_repeated_here(make_app, imported_run):
    client = make_app()
    run = imported_run(client)
    response = client.post(f"/api/runs/{run}/repeat", json={})
    assert response.status_code == 409
    assert response.json()["detail"] == f"run {run} was not trained by this dashboard; repeat it where it was trained"


def test_the_run_page_button_queues_two_seeds_and_opens_the_groups_comparison(make_app):
    from app.db import session_scope
    from app.models import Run, RunStatus

    client = make_app()
    run = client.post("/api/runs", json={**RUN, "seed": 1}).json()[0]
    assert 'id="repeat-btn"' not in client.get(f"/runs/{run['id']}").text  # queued: not finished yet
    with session_scope(client.app.state.settings) as session:  # as if it had run (the worker's part)
        row = session.get(Run, run["id"])
        row.status = RunStatus.succeeded
        session.add(row)
        session.commit()
    assert 'id="repeat-btn"' in client.get(f"/runs/{run['id']}").text
    response = client.post(f"/partials/runs/{run['id']}/repeat", headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert response.headers["HX-Redirect"] == f"/compare?ids={run['id']},{run['id'] + 1},{run['id'] + 2}&group_by=group"
    page = client.get(response.headers["HX-Redirect"]).text
    assert "(3 runs)" in page and "seed" in page
