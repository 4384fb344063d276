"""Groups of runs by name: a submission's group is named from what it is, follows its repeats until renamed, a
group made by hand is named by its id, and the name is what the API, the compare and run pages and the export show
(in-process)."""

from __future__ import annotations

import csv
import io

import pytest

from .test_seeds import RUN


@pytest.fixture
def three_seeds(make_app):  # noqa: ANN201
    client = make_app()
    response = client.post("/api/runs", json={**RUN, "name": "tiny-holmes", "seeds": [1337, 1338, 1339]})
    assert response.status_code == 201, response.text
    return client, response.json()


def test_a_submissions_group_is_named_from_its_name_and_seeds(three_seeds):
    client, runs = three_seeds
    group_id = runs[0]["group_id"]
    assert [r["group_name"] for r in runs] == ["tiny-holmes, seeds 1337-1339"] * 3
    group = client.get(f"/api/groups/{group_id}").json()
    assert (group["id"], group["name"], group["run_ids"]) == (group_id, "tiny-holmes, seeds 1337-1339",
                                                              [r["id"] for r in runs])
    listed = client.get("/api/runs", params={"group": group_id}).json()["items"]
    assert {r["group_name"] for r in listed} == {"tiny-holmes, seeds 1337-1339"}


def test_devices_name_their_group(make_app):
    runs = make_app().post("/api/runs", json={**RUN, "name": "holmes", "device": ["cpu", "cpu"]}).json()
    assert runs[0]["group_name"] == "holmes, seed 1337"  # the same device twice: one device in the name
    assert runs[0]["name"] == "holmes [cpu]"


def test_repeats_follow_the_name_until_it_is_renamed(three_seeds):
    client, runs = three_seeds
    group_id = runs[0]["group_id"]
    more = client.post(f"/api/runs/{runs[0]['id']}/repeat", json={"seeds": 2}).json()
    assert [r["group_name"] for r in more] == ["tiny-holmes, seeds 1337-1341"] * 2
    renamed = client.patch(f"/api/groups/{group_id}", json={"name": "baseline"})
    assert renamed.status_code == 200, renamed.text
    assert renamed.json()["name"] == "baseline" and len(renamed.json()["run_ids"]) == 5
    again = client.post(f"/api/runs/{runs[0]['id']}/repeat", json={"seeds": 1}).json()
    assert again[0]["group_name"] == "baseline"  # a name given by hand is kept
    assert client.get(f"/api/runs/{runs[2]['id']}").json()["group_name"] == "baseline"


def test_a_run_repeated_without_a_group_names_its_new_group_with_its_own_seed(make_app):
    client = make_app()
    first = client.post("/api/runs", json={**RUN, "seed": 10, "name": "base"}).json()[0]
    more = client.post(f"/api/runs/{first['id']}/repeat", json={"seeds": 2}).json()
    assert more[0]["group_name"] == "base, seeds 10-12"
    assert client.get(f"/api/runs/{first['id']}").json()["group_name"] == "base, seeds 10-12"


def test_a_group_made_by_hand_is_named_by_its_id(make_app, imported_run):
    client = make_app()
    run = imported_run(client)
    patched = client.patch(f"/api/runs/{run}", json={"group_id": "mine"}).json()
    assert (patched["group_id"], patched["group_name"]) == ("mine", "mine")
    assert client.get("/api/groups/mine").json()["run_ids"] == [run]


@pytest.mark.parametrize("body, field, message", [
    ({"name": ""}, "name", "String should have at least 1 character"),
    ({"name": "x" * 201}, "name", "String should have at most 200 characters"),
    ({"name": "a", "colour": "red"}, "colour", "unknown field 'colour'"),
])
def test_a_bad_rename_is_refused_naming_the_field(three_seeds, body, field, message):
    client, runs = three_seeds
    response = client.patch(f"/api/groups/{runs[0]['group_id']}", json=body)
    assert response.status_code == 422
    error = response.json()["detail"][0]
    assert error["loc"][-1] == field and error["msg"].startswith(message)
    assert client.get(f"/api/groups/{runs[0]['group_id']}").json()["name"] == "tiny-holmes, seeds 1337-1339"


def test_an_unknown_group_is_404(make_app):
    client = make_app()
    assert client.get("/api/groups/nope").json() == {"detail": "group 'nope' does not exist"}
    assert client.patch("/api/groups/nope", json={"name": "x"}).status_code == 404


def test_the_compare_page_the_run_page_and_the_export_show_the_name(three_seeds, make_app, imported_run):
    client, runs = three_seeds
    group_id, ids = runs[0]["group_id"], ",".join(str(r["id"]) for r in runs)
    other = [imported_run(client, config={"preset": "tiny", "steps": 10, "eval_every": 10, "seed": s}) for s in (1, 2)]
    for run in other:
        client.patch(f"/api/runs/{run}", json={"group_id": "imports"})
    both = ids + "," + ",".join(map(str, other))
    grouped = client.get("/api/compare", params={"ids": both, "group_by": "group"}).json()["grouped"]
    assert [(g["label"], g["group_id"]) for g in grouped["groups"]] == [
        ("tiny-holmes, seeds 1337-1339", group_id), ("imports", "imports")]
    page = client.get("/compare", params={"ids": both, "group_by": "group"}).text
    assert "<th>tiny-holmes, seeds 1337-1339 <span" in page and "<th>imports <span" in page
    assert f'hx-post="/partials/groups/{group_id}/name"' in page
    renamed = client.post(f"/partials/groups/{group_id}/name", data={"name": "  seeds on cpu "},
                          headers={"HX-Request": "true"})
    assert (renamed.status_code, renamed.headers["HX-Refresh"]) == (200, "true")
    assert client.get(f"/api/groups/{group_id}").json()["name"] == "seeds on cpu"
    refused = client.post(f"/partials/groups/{group_id}/name", data={"name": " "}, headers={"HX-Request": "true"})
    assert refused.status_code == 422 and "String should have at least 1 character" in refused.text
    run_page = client.get(f"/runs/{runs[1]['id']}").text
    assert f'<a href="/compare?ids={ids}&amp;group_by=group" id="group-link">seeds on cpu</a>' in run_page
    client.patch("/api/groups/imports", json={"name": "imported seeds"})
    exported = list(csv.DictReader(io.StringIO(client.get("/api/export", params={"ids": both}).text)))
    assert {(r["run_id"], r["group_id"], r["group"]) for r in exported} == {  # the queued runs have no rows yet
        (str(r), "imports", "imported seeds") for r in other}
