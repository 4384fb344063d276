"""Pages answer pages: a path that names nothing is an HTML 404 page (the API keeps its JSON), and every page
has the site's icon."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("path", ["/sweeps/new", "/runs/abc", "/no-such-page"])
def test_a_page_that_does_not_exist_is_a_404_page(make_app, path):
    response = make_app().get(path)
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("text/html")
    assert f"there is no page {path}" in response.text and "<nav>" in response.text


def test_the_api_still_answers_json(make_app):
    client = make_app()
    assert client.get("/api/no-such-thing").json() == {"detail": "Not Found"}
    error = client.get("/api/runs/abc").json()["detail"][0]
    assert (error["loc"], error["type"]) == (["path", "run_id"], "int_parsing")


def test_a_page_with_a_bad_query_says_which_parameter(make_app):
    response = make_app().get("/new", params={"from": "abc"})
    assert response.status_code == 422 and response.headers["content-type"].startswith("text/html")
    assert "from: Input should be a valid integer" in response.text


def test_every_page_links_the_site_icon_and_it_is_served(make_app):
    client = make_app()
    from app.static_files import asset_version

    assert f'<link rel="icon" type="image/svg+xml" href="/static/favicon.svg?v={asset_version()}">' in client.get("/").text
    icon = client.get("/static/favicon.svg")
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
