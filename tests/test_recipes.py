"""The sweeps kept in the repository (recipes/sweeps/, the searches docs/SPEEDRUN.md reports) are sweeps the
dashboard takes as they are: each submitted to a fresh home plans every point of its grid, its first trial
queued with the swept options."""

from __future__ import annotations

import math

import pytest
import yaml
from sqlmodel import select

from app.db import session_scope
from app.models import Run
from app.settings import Settings
from app.sweep_submit import submit_local

from .service_helpers import ROOT

SWEEPS = sorted((ROOT / "recipes" / "sweeps").glob("*.yaml"))


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.name)
def test_a_kept_sweep_is_taken_as_it_is(path, tmp_path, slice_path):
    config = yaml.safe_load(path.read_text())
    settings = Settings(home=tmp_path, holmes_path=slice_path)
    sweep = submit_local(path.read_text(), settings)
    assert sweep["name"] == path.stem
    if config["method"] == "grid":
        assert sweep["trials_planned"] == math.prod(len(p.get("values", [None])) for p in config["parameters"].values())
    with session_scope(settings) as s:
        [first] = s.exec(select(Run).where(Run.sweep_id == sweep["id"])).all()  # parallel 1
    for name, value in config["base"].items():
        assert first.config.get(name, value) == value, name
    for name, parameter in config["parameters"].items():
        assert first.config[name] in parameter.get("values", [parameter.get("value")]), name
