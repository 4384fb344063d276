"""Checkpoints are read with ``torch.load(weights_only=True)``: a checkpoint-shaped pickle that
would run code is refused, by the command line, by resume and by the dashboard's sample box, and
its payload never runs."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import httpx
import pytest
import torch

from tinygpt.checkpoint import CheckpointError, read_checkpoint

from .service_helpers import AppServer, Home, run_tinygpt


class CreatesAFile:
    """Unpickling this opens (creates) ``target``: what a hostile checkpoint could do."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self) -> tuple:
        return (open, (str(self.target), "w"))


def hostile_checkpoint(path: Path, target: Path) -> Path:
    """A file shaped like a tinygpt checkpoint, with the payload inside."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"version": 1, "model": CreatesAFile(target), "model_config": {}, "step": 1}, path)
    return path


def tinygpt(*args: str, home: Path, corpus: Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "TINYGPT_HOME": str(home), "TINYGPT_HOLMES_PATH": str(corpus)}
    return run_tinygpt(*args, env=env, module="tinygpt", timeout=120)


def test_read_checkpoint_refuses_a_pickle_with_code(tmp_path):
    target = tmp_path / "created-by-payload"
    path = hostile_checkpoint(tmp_path / "best.pt", target)
    with pytest.raises(CheckpointError) as err:
        read_checkpoint(path)
    assert str(err.value) == (f"{path} was refused: it holds objects other than tensors and plain data (io.open), "
                              "and loading it could run code")
    assert not target.exists()


def test_tinygpt_sample_refuses_it_in_one_line(tmp_path, slice_path):
    target = tmp_path / "created-by-payload"
    path = hostile_checkpoint(tmp_path / "best.pt", target)
    result = tinygpt("sample", str(path), "--prompt", "Holmes", home=tmp_path / "home", corpus=slice_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"tinygpt sample: error: {path} was refused: it holds objects other than tensors and plain data (io.open), "
        "and loading it could run code"]
    assert not target.exists()


def test_resume_refuses_it(tmp_path, slice_path):
    target = tmp_path / "created-by-payload"
    out = tmp_path / "run"
    hostile_checkpoint(out / "last.pt", target)
    result = tinygpt("train", "--preset", "tiny", "--corpus", str(slice_path), "--device", "cpu", "--steps", "5",
                     "--batch-size", "2", "--vocab-size", "300", "--out", str(out), "--resume",
                     home=tmp_path / "home", corpus=slice_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"tinygpt train: error: {out / 'last.pt'} was refused: it holds objects other than tensors and plain data "
        "(io.open), and loading it could run code")
    assert not target.exists()


def test_sample_box_refuses_it(tmp_path, slice_path):
    home = Home(tmp_path / "home", slice_path)
    home.path.mkdir()
    app = AppServer(home)
    try:
        with app.client() as c:
            run_id = c.post("/api/runs", json={"preset": "tiny", "device": "cpu", "steps": 5}).json()[0]["id"]
        target = tmp_path / "created-by-payload"
        path = hostile_checkpoint(home.path / "runs" / str(run_id) / "best.pt", target)
        with sqlite3.connect(home.path / "tinygpt.db") as db:  # as if a job had written it, or a shared folder
            db.execute("UPDATE runs SET checkpoint_path = ?, status = 'succeeded' WHERE id = ?", (str(path), run_id))
        with httpx.Client(base_url=app.url, timeout=30) as c:  # refused before the stream starts
            response = c.post(f"/api/runs/{run_id}/sample", json={"prompt": "Holmes", "max_tokens": 5})
        assert response.status_code == 422
        assert response.json()["detail"][0]["msg"] == (
            "the run's checkpoint cannot be loaded: best.pt was refused: it holds objects other than tensors and "
            "plain data (io.open), and loading it could run code")
        assert not target.exists()
    finally:
        app.stop()
