"""Notes on runs: Markdown rendered safely on the run page (saved as one stops typing), an excerpt in the run
list, found by the list's search, in the API and the metrics export."""

from __future__ import annotations

import csv
import io

import httpx

from .browser import needs_chromium, open_page, shot

RUN = {"preset": "tiny", "device": "cpu", "precision": "fp32", "batch_size": 4, "steps": 5, "eval_every": 5}
NOTE = "# Seed noise\n\nThree seeds, **lr 2e-3**: see [the series](https://example.com/a).\n\n<script>window.pwned = 1</script>"


def test_the_run_page_renders_a_note_as_markdown_and_a_script_as_text(make_app):
    client = make_app()
    run = client.post("/api/runs", json={**RUN, "name": "noted"}).json()[0]
    assert client.patch(f"/api/runs/{run['id']}", json={"notes": NOTE}).json()["notes"] == NOTE
    page = client.get(f"/runs/{run['id']}").text
    rendered = page.split('<div class="markdown" id="notes-rendered">')[1].split("</div>")[0]
    assert "<h1>Seed noise</h1>" in rendered and "<strong>lr 2e-3</strong>" in rendered
    assert '<a href="https://example.com/a">the series</a>' in rendered
    assert "<script>" not in rendered and "&lt;script&gt;window.pwned = 1&lt;/script&gt;" in rendered


def test_a_link_with_a_script_scheme_is_not_a_link(make_app):
    client = make_app()
    run = client.post("/api/runs", json=RUN).json()[0]
    client.patch(f"/api/runs/{run['id']}", json={"notes": "[x](javascript:alert(1))"})
    rendered = client.get(f"/runs/{run['id']}").text.split('id="notes-rendered">')[1].split("</div>")[0]
    assert rendered == "<p>[x](javascript:alert(1))</p>\n"  # shown as typed, never an href


def test_typing_saves_the_note_and_returns_it_rendered(make_app):
    client = make_app()
    run = client.post("/api/runs", json=RUN).json()[0]
    response = client.post(f"/partials/runs/{run['id']}/notes", data={"notes": "*tried* warmup 50"},
                           headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert "<em>tried</em> warmup 50" in response.text and 'id="notes-saved"' in response.text
    assert client.get(f"/api/runs/{run['id']}").json()["notes"] == "*tried* warmup 50"
    too_long = client.post(f"/partials/runs/{run['id']}/notes", data={"notes": "n" * 20_001},
                           headers={"HX-Request": "true"})
    assert too_long.status_code == 422 and "at most 20000 characters" in too_long.text
    assert client.get(f"/api/runs/{run['id']}").json()["notes"] == "*tried* warmup 50"  # nothing lost


def test_the_run_list_shows_an_excerpt_and_its_search_finds_names_and_notes(make_app):
    client = make_app()
    ids = [client.post("/api/runs", json={**RUN, "name": name}).json()[0]["id"] for name in ("alpha", "beta", "50%")]
    client.patch(f"/api/runs/{ids[0]}", json={"notes": "\nWarmup too short?\nsecond line"})
    client.patch(f"/api/runs/{ids[1]}", json={"notes": "baseline"})

    def found(q: str) -> list[int]:
        table = client.get("/partials/runs", params={"q": q}).text
        return sorted(i for i in ids if f'id="run-{i}"' in table)

    assert found("WARMUP") == [ids[0]]  # in the notes, any case
    assert found("bet") == [ids[1]]  # in the name
    assert found("%") == [ids[2]]  # taken literally, not as LIKE's wildcard
    assert found("nothing like it") == []
    listed = client.get("/").text
    assert '<div class="note-excerpt muted" title="\nWarmup too short?\nsecond line">Warmup too short?</div>' in listed


def test_the_metrics_export_carries_the_notes(make_app, imported_run):
    client = make_app()
    run = imported_run(client)
    client.patch(f"/api/runs/{run}", json={"notes": "imported from the lab"})
    rows = list(csv.DictReader(io.StringIO(client.get("/api/export", params={"ids": str(run)}).text)))
    assert rows and {r["notes"] for r in rows} == {"imported from the lab"}


@needs_chromium
def test_a_note_typed_on_the_page_is_saved_and_a_script_in_it_stays_text(start_service, browser):
    app = start_service("notes").app
    run = httpx.post(f"{app.url}/api/runs", json={**RUN, "device": "auto"}, timeout=30).json()[0]
    page = open_page(browser)
    page.goto(f"{app.url}/runs/{run['id']}")
    page.click("#notes-card summary")
    page.fill("#notes-input", NOTE)
    page.wait_for_selector("#notes-saved")
    assert page.inner_text("#notes-rendered h1") == "Seed noise"
    assert "<script>window.pwned = 1</script>" in page.inner_text("#notes-rendered")
    assert page.evaluate("window.pwned") is None
    shot(page, "run-notes")
    page.reload()
    assert page.input_value("#notes-input") == NOTE and page.get_attribute("#notes-card", "open") == ""
    assert httpx.get(f"{app.url}/api/runs/{run['id']}", timeout=30).json()["notes"] == NOTE
    page.context.close()
    assert page.js_errors == [], page.js_errors


SWEEP = {"method": "grid", "parameters": {"lr": {"values": [0.01]}},
         "base": {"preset": "tiny", "device": "cpu", "steps": 2, "eval_every": 2, "batch_size": 4},
         "description": "Does **lr** matter at 2 steps?"}


def test_a_sweeps_description_starts_its_notes_which_its_page_edits(make_app):
    client = make_app()
    sweep = client.post("/api/sweeps", json=SWEEP).json()
    assert sweep["notes"] == "Does **lr** matter at 2 steps?"
    page = client.get(f"/sweeps/{sweep['id']}").text
    assert "Does <strong>lr</strong> matter at 2 steps?" in page
    saved = client.post(f"/partials/sweeps/{sweep['id']}/notes", data={"notes": "no: <b>too short</b>"},
                        headers={"HX-Request": "true"})
    assert saved.status_code == 200 and "no: &lt;b&gt;too short&lt;/b&gt;" in saved.text
    assert client.get(f"/api/sweeps/{sweep['id']}").json()["notes"] == "no: <b>too short</b>"
    patched = client.patch(f"/api/sweeps/{sweep['id']}", json={"notes": "# done"})
    assert patched.status_code == 200 and patched.json()["notes"] == "# done"
    assert client.patch(f"/api/sweeps/{sweep['id']}", json={"note": "x"}).json()["detail"][0]["msg"] == \
        "unknown field 'note': did you mean 'notes'?"
