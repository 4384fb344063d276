"""The run page's Config table, in-process: options that take effect only with another option's value
(``applies_with`` in their declaration) say when they did not."""

from __future__ import annotations

import html
import re

import pytest

RUN = {"preset": "tiny", "device": "cpu", "precision": "fp32", "batch_size": 4, "steps": 5, "eval_every": 5}


def config_table(client, run_id: int) -> dict[str, str]:  # noqa: ANN001
    page = client.get(f"/runs/{run_id}").text
    table = re.search(r'<table class="config" id="config">(.*?)</table>', page, re.S).group(1)
    return {k: html.unescape(v) for k, v in re.findall(r"<tr><th>(.*?)</th><td>(.*?)</td></tr>", table)}


@pytest.mark.parametrize("options, expected", [
    ({}, {"muon_lr": "0.02 (not used: optimizer adamw)", "muon_momentum": "0.95 (not used: optimizer adamw)",
          "decay_fraction": "0.2 (not used: lr_schedule cosine)", "compile_mode": "default (not used: compile off)"}),
    ({"optimizer": "muon", "lr_schedule": "wsd", "compile": True, "muon_lr": 0.01},
     {"muon_lr": "0.01", "muon_momentum": "0.95", "decay_fraction": "0.2", "compile_mode": "default"}),
])
def test_options_that_did_not_take_effect_say_which_option_decided_it(make_app, options, expected):
    client = make_app()
    run_id = client.post("/api/runs", json={**RUN, **options}).json()[0]["id"]
    rows = config_table(client, run_id)
    assert {name: rows[name] for name in expected} == expected
    assert rows["lr"] == "0.001" and rows["optimizer"] == options.get("optimizer", "adamw")  # always in effect


def test_options_left_unset_show_what_the_run_used(make_app):
    client = make_app()
    run_id = client.post("/api/runs", json={**RUN, "steps": 40, "eval_every": 8, "warmup": None}).json()[0]["id"]
    rows = config_table(client, run_id)
    # warmup min(200, 40 // 10); eval batches half the 8 trained between evaluations; log min(10, 8); samples 8
    assert (rows["warmup"], rows["eval_batches"], rows["log_every"], rows["sample_every"]) == \
        ("unset → 4", "unset → 4", "unset → 8", "unset → 8")
    # model options left to the preset: the value the run used and where it came from
    assert (rows["d_model"], rows["n_layers"], rows["norm"], rows["dropout"], rows["attn_dropout"]) == \
        ("64 (tiny)", "4 (tiny)", "rmsnorm (modern)", "0.0 (tiny)", "0.0 (dropout's)")
