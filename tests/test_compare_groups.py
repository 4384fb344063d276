"""``GET /api/compare?group_by=``: runs grouped by an option's value, each figure's mean, standard deviation and
n, and for two groups their difference with Welch's 95 % interval and the sentence (in-process; the statistics
themselves: tests/test_group_stats.py)."""

from __future__ import annotations

import math

import httpx
import pytest

from app.services.group_stats import verdict, welch
from tinygpt.presets import model_config

from .browser import needs_chromium, open_page, shot
from .conftest import IMPORTED_RUN


def run_with_best(client, imported_run, device: str, best: float, seed: int) -> int:  # noqa: ANN001
    """An imported run whose evaluations end at ``best`` (its best validation loss)."""
    metrics = [{**row, "val_loss": (best + 1.0 if row["step"] == 0 else best) if row["val_loss"] or row["step"] == 0
                else None} for row in IMPORTED_RUN["metrics"]]
    return imported_run(client, device=device, metrics=metrics, config={**IMPORTED_RUN["config"], "seed": seed})


@pytest.fixture
def two_devices(make_app, imported_run):  # noqa: ANN201
    client = make_app()
    cpu = [run_with_best(client, imported_run, "cpu", best, seed) for best, seed in ((3.76, 1), (3.78, 2), (3.77, 3))]
    gpu = [run_with_best(client, imported_run, "cuda", best, seed) for best, seed in ((3.75, 1), (3.77, 2))]
    return client, cpu, gpu


def test_runs_grouped_by_device_carry_each_groups_spread_and_the_difference(two_devices):
    client, cpu, gpu = two_devices
    response = client.get("/api/compare", params={"ids": ",".join(map(str, cpu + gpu)), "group_by": "device"})
    assert response.status_code == 200, response.text
    grouped = response.json()["grouped"]
    assert [(g["label"], g["run_ids"]) for g in grouped["groups"]] == [("device cpu", cpu), ("device cuda", gpu)]
    cpu_best, gpu_best = grouped["groups"][0]["figures"]["best_val_loss"], grouped["groups"][1]["figures"]["best_val_loss"]
    assert cpu_best == {"mean": pytest.approx(3.77), "std": pytest.approx(0.01), "n": 3}
    assert gpu_best == {"mean": pytest.approx(3.76), "std": pytest.approx(math.sqrt(0.0002)), "n": 2}
    d = grouped["difference"]["best_val_loss"]
    assert d["difference"] == pytest.approx(-0.01)
    v1, v2 = 0.0001 / 3, 0.0002 / 2  # the variances over n
    assert d["dof"] == pytest.approx((v1 + v2) ** 2 / (v1**2 / 2 + v2**2 / 1))
    assert d["within_noise"] is True and d["low"] < 0 < d["high"]
    assert grouped["verdict"] == verdict("cuda", "cpu", "best validation loss", welch([3.76, 3.78, 3.77], [3.75, 3.77]),
                                         3, 2)
    assert grouped["verdict"].startswith("cuda - cpu best validation loss: -0.010 +/- ") and \
        grouped["verdict"].endswith(" (2 and 3 runs): within seed noise")
    assert grouped["groups"][0]["figures"]["target_sec"] is None  # no run has a target: no figure, not zero
    # each group's curve at the evaluation steps its runs share (0 and 10), its x-axes and band edges
    curve = grouped["groups"][0]["curve"]
    per_token = model_config("tiny").training_flops_per_token
    assert (curve["step"], curve["tokens_seen"]) == ([0, 10], [0, 1000])
    assert curve["flops"] == [0, 1000 * per_token]
    assert curve["val_mean"][1] == pytest.approx(3.77) and (curve["min"][1], curve["max"][1]) == (3.76, 3.78)
    assert (curve["std_low"][1], curve["std_high"][1]) == (pytest.approx(3.76), pytest.approx(3.78))


def test_grouping_by_an_option_every_run_shares_gives_one_group_and_no_difference(two_devices):
    client, cpu, gpu = two_devices
    grouped = client.get("/api/compare", params={"ids": ",".join(map(str, cpu + gpu)), "group_by": "preset"}).json()["grouped"]
    assert [(g["label"], len(g["run_ids"])) for g in grouped["groups"]] == [("preset tiny", 5)]
    assert grouped["difference"] is None and grouped["verdict"] is None


@pytest.mark.parametrize("group_by, message", [
    ("devise", "unknown run option 'devise': did you mean 'device'?"),
    ("x" * 101, "String should have at most 100 characters"),
])
def test_an_unknown_option_to_group_by_is_refused_naming_it(two_devices, group_by, message):
    client, cpu, gpu = two_devices
    response = client.get("/api/compare", params={"ids": f"{cpu[0]},{gpu[0]}", "group_by": group_by})
    assert response.status_code == 422
    error = response.json()["detail"][0]
    assert error["loc"][-1] == "group_by" and error["msg"].startswith(message)


def test_grouped_comparisons_take_more_runs_than_plain_ones(make_app, imported_run):
    client = make_app()
    ids = ",".join(str(run_with_best(client, imported_run, "cpu", 3.7 + i / 100, i)) for i in range(11))
    assert client.get("/api/compare", params={"ids": ids}).json()["detail"][0]["msg"] == \
        "compare at most 10 runs at once (got 11)"
    assert len(client.get("/api/compare", params={"ids": ids, "group_by": "seed"}).json()["grouped"]["groups"]) == 11


def test_the_compare_page_groups_runs_and_says_whether_the_difference_is_noise(two_devices):
    client, cpu, gpu = two_devices
    page = client.get("/compare", params={"ids": ",".join(map(str, cpu + gpu)), "group_by": "device"}).text
    assert '<option selected>device</option>' in page
    row = page.split('<tr data-figure="best_val_loss">')[1].split("</tr>")[0]
    assert "<td>3.7700 ± 0.0100 (n=3)</td>" in row and "<td>3.7600 ± 0.0141 (n=2)</td>" in row
    assert '<td class="difference">-0.0100 ± ' in row and "(within seed noise)</td>" in row
    assert '<p id="group-verdict">cuda - cpu best validation loss: -0.010 +/- ' in page


@needs_chromium
def test_the_grouped_compare_page_in_chromium(start_service, browser):
    app = start_service("compare-groups").app
    ids = {"cpu": [], "cuda": []}
    for device, bests in (("cpu", (3.760, 3.762, 3.761)), ("cuda", (3.700, 3.702, 3.701))):
        for seed, best in enumerate(bests):
            metrics = [{**row, "val_loss": best + (10 - row["step"]) / 10 if row["step"] % 5 == 0 else None}
                       for row in IMPORTED_RUN["metrics"]]  # evaluations at steps 0, 5 and 10, the best last
            body = {**IMPORTED_RUN, "name": f"{device} seed {seed}", "device": device, "metrics": metrics,
                    "config": {**IMPORTED_RUN["config"], "seed": seed}}
            ids[device].append(httpx.post(f"{app.url}/api/runs/import", json=body, timeout=30).json()["id"])
    page = open_page(browser)
    page.goto(f"{app.url}/compare?ids={','.join(map(str, ids['cpu'] + ids['cuda']))}&group_by=device")
    assert page.locator("#groups-table thead th").all_inner_texts() == [
        "device cpu (3 runs)", "device cuda (3 runs)", "cuda - cpu (95% interval)"]
    cells = page.locator("#groups-table tr[data-figure=best_val_loss] td").all_inner_texts()
    assert cells[:2] == ["3.7610 ± 0.0010 (n=3)", "3.7010 ± 0.0010 (n=3)"]
    assert cells[2].startswith("-0.0600 ± 0.00") and cells[2].endswith("(larger than seed noise)")
    assert page.inner_text("#group-verdict").startswith("cuda - cpu best validation loss: -0.060 +/- 0.00")
    assert page.inner_text("#group-verdict").endswith("(3 runs each): larger than seed noise")
    assert page.input_value("#group-by") == "device"
    # the chart: per group a mean curve and its band (two edges, the area between them filled)
    labels = page.evaluate("document.getElementById('compare-chart').uplot.series.slice(1).map(s => s.label)")
    assert labels == ["device cpu val mean (3 runs)", "device cpu max", "device cpu min",
                      "device cuda val mean (3 runs)", "device cuda max", "device cuda min"]
    assert page.evaluate("document.getElementById('compare-chart').uplot.bands.length") == 2
    page.select_option("#band", "std")
    page.select_option("#x-axis", "flops")  # training FLOPs: tokens seen x the model's FLOPs per token
    assert page.evaluate("document.getElementById('compare-chart').uplot.data[0].at(-1)") == \
        1000 * model_config("tiny").training_flops_per_token
    page.select_option("#x-axis", "tokens_seen")
    page.locator(".u-legend .u-series", has_text="device cpu val mean").click()  # hides the cpu mean
    box = page.locator("#compare-chart .u-over").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + 20)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.7, box["y"] + 20, steps=5)
    page.mouse.up()  # a zoom: dragged across the chart
    shot(page, "compare-groups")
    link = page.url
    assert "band=std" in link and "x=tokens_seen" in link and "hide=1" in link and "zoom=" in link
    zoomed = page.evaluate("[document.getElementById('compare-chart').uplot.scales.x.min, "
                           "document.getElementById('compare-chart').uplot.scales.x.max]")
    again = open_page(browser)
    again.goto(link)  # the copied link opens the same view
    assert (again.input_value("#band"), again.input_value("#x-axis"), again.input_value("#group-by")) == \
        ("std", "tokens_seen", "device")
    assert again.evaluate("document.getElementById('compare-chart').uplot.series.map(s => s.show)") == \
        [True, False, True, True, True, True, True]
    assert again.evaluate("document.getElementById('compare-chart').uplot.series[2].label") == "device cpu +1 std"
    restored = again.evaluate("[document.getElementById('compare-chart').uplot.scales.x.min, "
                              "document.getElementById('compare-chart').uplot.scales.x.max]")
    assert restored == pytest.approx(zoomed, rel=1e-5)
    for p in (page, again):
        p.context.close()
        assert p.js_errors == [], p.js_errors


def test_runs_group_by_tag_and_by_hand(two_devices):
    client, cpu, gpu = two_devices
    for run in cpu[:2]:
        client.patch(f"/api/runs/{run}", json={"tags": ["baseline"], "group_id": "mine"})
    client.patch(f"/api/runs/{gpu[0]}", json={"tags": ["baseline", "fast"], "group_id": "mine"})
    ids = ",".join(map(str, cpu + gpu))
    by_tag = client.get("/api/compare", params={"ids": ids, "group_by": "tag"}).json()["grouped"]["groups"]
    assert [(g["label"], g["run_ids"]) for g in by_tag] == [
        ("tag baseline", [cpu[0], cpu[1], gpu[0]]), ("tag –", [cpu[2], gpu[1]]), ("tag fast", [gpu[0]])]
    by_hand = client.get("/api/compare", params={"ids": ids, "group_by": "group"}).json()["grouped"]["groups"]
    assert [(g["label"], g["run_ids"]) for g in by_hand] == [("mine", [cpu[0], cpu[1], gpu[0]]),
                                                             ("no group", [cpu[2], gpu[1]])]


def test_runs_of_one_group_that_resolved_auto_differently_are_flagged(make_app, imported_run):
    """Three seeds asked for ``precision: auto``; their jobs resolved it fp32, bf16, fp32: the comparison shows the
    resolved values among the config differences and flags the group, in the API and on the page."""
    client = make_app()
    ids = [imported_run(client, precision=p, config={**IMPORTED_RUN["config"], "precision": "auto", "seed": seed})
           for seed, p in ((1, "fp32"), (2, "bf16"), (3, "fp32"))]
    for run_id in ids:
        assert client.patch(f"/api/runs/{run_id}", json={"group_id": "seeds"}).status_code == 200
    body = client.get("/api/compare", params={"ids": ",".join(map(str, ids)), "group_by": "group"}).json()
    assert body["config_differences"]["precision"] == ["fp32", "bf16", "fp32"]
    message = "these runs differ in precision: fp32 x2, bf16 x1 (all asked for auto)"
    assert body["resolved_differently"] == [{"option": "precision", "asked": "auto", "counts": {"fp32": 2, "bf16": 1},
                                             "message": message}]
    [group] = body["grouped"]["groups"]
    assert [d["message"] for d in group["resolved_differently"]] == [message]
    page = client.get("/compare", params={"ids": ",".join(map(str, ids)), "group_by": "group"}).text
    assert f'<p class="warning-box resolved-differently">{message}</p>' in page
    assert f"{message}; its spread mixes unlike runs.</div>" in page
    alike = [imported_run(client, precision="bf16", config={**IMPORTED_RUN["config"], "precision": "auto",
                                                            "seed": seed}) for seed in (4, 5)]
    same = client.get("/api/compare", params={"ids": ",".join(map(str, alike))}).json()
    assert same["resolved_differently"] == [] and "precision" not in same["config_differences"]
