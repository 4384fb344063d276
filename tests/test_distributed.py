"""Several processes training one model (DistributedDataParallel over gloo, on the CPU), launched
by torchrun: the same curve as one process with the same global batch."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tinygpt.distributed import shard, torchrun_command
from tinygpt.ranks import DistInfo
from tinygpt.records import read_metrics_csv


def train_args(corpus, out) -> list[str]:
    return ["train", "--preset", "tiny", "--corpus", str(corpus), "--device", "cpu", "--precision", "fp32",
            "--steps", "20", "--batch-size", "8", "--eval-every", "10", "--log-every", "5", "--seed", "3",
            "--threads", "1", "--out", str(out), "--no-progress"]


def run(cmd: list[str], cache) -> subprocess.CompletedProcess:
    env = {**os.environ, "TINYGPT_HOME": str(cache)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.mark.slow  # 38 s on 2 cores: three trainings, two of them as two gloo processes each
def test_two_gloo_processes_follow_the_single_process_curve(tmp_path, slice_path, warm_cache):
    home = tmp_path / "home"
    shutil.copytree(warm_cache, home / "cache")
    run([sys.executable, "-m", "tinygpt", *train_args(slice_path, tmp_path / "one")], home)
    double = run(torchrun_command(2, "tinygpt", *train_args(slice_path, tmp_path / "two")), home)
    assert "x 2 processes" in double.stdout and double.stdout.count("done:") == 1  # rank 0 reports, once
    one = read_metrics_csv(tmp_path / "one" / "metrics.csv")
    two = read_metrics_csv(tmp_path / "two" / "metrics.csv")
    assert [m.step for m in one] == [m.step for m in two] == [0, 5, 10, 15, 20]  # each row once
    for a, b in zip(one, two, strict=True):
        assert abs(a.train_loss - b.train_loss) < 2e-3, (a, b)
        if a.val_loss is not None:
            assert abs(a.val_loss - b.val_loss) < 2e-3, (a, b)
        assert a.tokens_seen == b.tokens_seen  # the global batch counts once
    assert one[-1].val_loss < one[0].val_loss - 0.3  # it did learn
    assert (tmp_path / "two" / "best.pt").exists()


@pytest.mark.parametrize("rank, rows", [(0, [0, 1]), (1, [2, 3])])
def test_each_rank_takes_its_rows_of_the_global_batch(rank, rows):
    import torch

    batch = torch.arange(8).view(4, 2)
    assert shard(batch, DistInfo(rank=rank, world_size=2))[:, 0].tolist() == [2 * r for r in rows]
    assert shard(batch, DistInfo()).shape == (4, 2)
