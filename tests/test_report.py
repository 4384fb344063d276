"""The reproduction report (docs/REPRODUCTION.md): its chart script and its links."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "loss_chart.py"
REPORT = ROOT / "docs" / "REPRODUCTION.md"


def chart(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=tmp_path, capture_output=True, text=True)


@pytest.fixture
def metrics_csv(tmp_path: Path) -> Path:
    path = tmp_path / "run.csv"
    path.write_text(
        "step,train_loss,val_loss,lr\n"
        "0,8.4,8.3,0.0\n10,7.0,,0.001\n20,6.0,,0.001\n30,5.5,5.9,0.001\n40,5.0,,0.001\n"
    )
    return path


def test_chart_draws_each_run_and_published_figures(tmp_path: Path, metrics_csv: Path) -> None:
    published = tmp_path / "published.csv"
    published.write_text("step,train_loss,val_loss\n30,5.4,5.8\n")
    result = chart(tmp_path, "out.svg", "--svg", "--title", "A & B", "--run", "CPU=run.csv",
                   "--points", f"series={published.name}")
    assert result.returncode == 0, result.stderr
    svg = (tmp_path / "out.svg").read_text()
    lines = re.findall(r'<polyline[^>]*points="([^"]*)"', svg)
    # train batch losses at the 3 logged steps that are not evaluations; train estimates and val at the 2 evaluations
    assert [len(p.split()) for p in lines] == [3, 2, 2]
    assert svg.count('r="5"') == 1 + 1  # the published val marker and its legend entry
    assert svg.count('width="8" height="8"') == 1  # the published train marker
    assert "A &amp; B" in svg and ">CPU</text>" in svg and ">series</text>" in svg
    xs = [float(p.split(",")[0]) for p in lines[0].split()]
    assert xs == sorted(xs) and xs[0] < xs[-1]


def test_chart_clips_to_the_requested_range(tmp_path: Path, metrics_csv: Path) -> None:
    result = chart(tmp_path, "out.svg", "--svg", "--run", "CPU=run.csv", "--y-min", "5", "--y-max", "6",
                   "--x-max", "30")
    assert result.returncode == 0, result.stderr
    svg = (tmp_path / "out.svg").read_text()
    train = re.findall(r'<polyline[^>]*points="([^"]*)"', svg)[0].split()
    assert len(train) == 2  # steps 10 and 20: 0 and 30 are evaluations, 40 is past --x-max
    ys = [float(p.split(",")[1]) for p in train]
    assert ys[0] == ys[1]  # 7.0 and 6.0 both clipped to the top edge (6)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--run", "run.csv"], "error: 'run.csv' is not LABEL=CSV"),
        (["--run", "CPU=missing.csv"], "error: cannot read missing.csv: No such file or directory"),
        (["--run", "CPU=bad.csv"], "error: bad.csv is not a metrics CSV with step, train_loss, val_loss columns"),
        ([], "give at least one --run or --points"),
    ],
)
def test_chart_rejects_bad_input(tmp_path: Path, metrics_csv: Path, args: list[str], message: str) -> None:
    (tmp_path / "bad.csv").write_text("when,loss\n1,2\n")
    result = chart(tmp_path, "out.svg", "--svg", *args)
    assert result.returncode != 0
    assert message in result.stderr
    assert not (tmp_path / "out.svg").exists()


def test_report_links_resolve() -> None:
    text = REPORT.read_text()
    links = re.findall(r"\]\(([^)#]+)\)", text) + re.findall(r"`(runs/[\w.-]+\.csv)`", text)
    assert len(links) >= 4
    missing = [link for link in links if not (REPORT.parent / link).exists()]
    assert missing == []
