"""BENCHMARKS.md's sections (benchmarks/run.py): each kind of CPU held to its own goal, the speedrun's line, and
another machine's figures kept beside the page's own."""

from __future__ import annotations

import datetime
import json
import math

import pytest

from benchmarks import run
from benchmarks.run import speedrun_section, train_section

AVX2 = "avx2 fma; bf16 emulated (no AVX512-BF16 or AMX); precision auto = fp32"
BF16 = "avx2 fma avx512f avx512_bf16; bf16 in hardware; precision auto = bf16"


def train_results(**ratios: float) -> dict:
    return {"preset": "holmes", "batch_size": 32, "tokens_per_sec": {name: 1000 * r for name, r in ratios.items()},
            "ratio_vs_plain": ratios, "auto_precision": "bf16" if "project_auto(bf16)" in ratios else "fp32",
            "first_step_s": {"project_fp32_compiled": 8.0}, "compile_break_even_steps": math.inf,
            "profile": {"matrix products": 0.6, "everything else": 0.4}}


def test_an_avx2_cpu_is_held_to_the_fp32_goal():
    lines = train_section(train_results(plain_fp32=1.0, project_fp32=1.4), AVX2, "## Training step")
    assert lines[0] == "## Training step"
    assert "| project_fp32 | 1,400 | 1.40 |" in lines
    assert ("The series' own step (project_fp32): **1.40x the plain fp32 loop** (goal on an AVX2 CPU: at least 1.3x:"
            " met).") in lines
    assert [line for line in lines if line.startswith("CPU flags: ")][0].startswith(f"CPU flags: {AVX2}. ")


def test_a_cpu_with_bf16_units_is_held_to_the_bf16_goal_and_says_when_it_is_not_met():
    lines = train_section(train_results(plain_fp32=1.0, project_fp32=1.3, **{"project_auto(bf16)": 2.14}), BF16,
                          "## Training step on a CPU with bf16 units")
    assert ("The series' own step (project_auto(bf16)): **2.14x the plain fp32 loop** (goal on a CPU with AVX512-BF16"
            " or AMX: at least 2.5x: NOT met).") in lines
    assert not any("emulated and slower" in line for line in lines)


def at_precision(precision: str, resolved: str, *train_sec: float | None) -> dict:
    """One precision's part of a speedrun record: the fast recipe's seeds' training times against the series'
    3,234.5 s."""
    runs = [{"seed": seed, "steps": 1152, "reached": sec is not None, "best_val_loss": 3.75 if sec else 3.8,
             "step": 1104, "tokens": 4_521_984, "train_sec": sec, "val_loss_full": 3.755}
            for seed, sec in zip((1337, 1, 2), train_sec, strict=False)]
    slowest = max(s for s in train_sec if s) if all(train_sec) else None
    return {"precision": precision, "resolved_precision": resolved, "series_record": "docs/runs/series.csv",
            "series_tokens_to_target": 9_380_000.0, "series_tokens_per_sec": 2_900.0, "fast_step_tokens_per_sec": 4_400.0,
            "series_sec_to_target": 3_234.5, "series_run": None, "fast_runs": runs, "fast_slowest_sec": slowest,
            "fast_over_series": slowest / 3_234.5 if slowest else None}


def speedrun_results(*train_sec: float | None, auto: tuple[float | None, ...] | None = None) -> dict:
    """A speedrun record: fp32 with ``train_sec``, and first precision auto (bf16) with ``auto`` where given."""
    parts = ([at_precision("auto", "bf16", *auto)] if auto else []) + [at_precision("fp32", "fp32", *train_sec)]
    return {"target": 3.76, "device": "cpu", "threads": 2, "fast_options": {"batch_size": 16, "n_layers": 4},
            "precisions": parts}


def test_the_speedrun_section_names_the_recipe_measured_and_the_slowest_seeds_ratio():
    lines = speedrun_section(speedrun_results(700.0, 800.0, 750.0), " on another CPU")
    assert lines[0] == "## Time to target: the fast recipe against the series' (validation loss 3.76) on another CPU"
    assert "The fast recipe measured: batch_size 16, n_layers 4." in lines
    assert "### Precision fp32" in lines
    assert "| 1 | 1104 | 4.52M | 13.3 min | 3.7550 |" in lines
    assert "fast / series time to target: 0.25" in lines
    assert ("(the slowest of 3 seed(s), 0.247, 13.3 min; the goals, the slowest of 3: fast / series at most 0.25:"
            " met)") in lines
    assert ("(the slowest of 3 seed(s), 0.253, 13.6 min; the goals, the slowest of 3: fast / series at most 0.25:"
            " NOT met)") in speedrun_section(speedrun_results(818.0, 700.0, 700.0))  # 0.253 prints as 0.25: over
    lines = speedrun_section(speedrun_results(1000.0, None, 1050.0))
    assert "| 1 | not in 1152 steps (best 3.8000) | | | |" in lines
    assert "fast / series time to target: not measured (a seed did not reach the target)" in lines
    assert "(the slowest of 3 seed(s); the goals, the slowest of 3: fast / series at most 0.25: NOT met)" in lines


def test_where_auto_means_bf16_the_fast_recipe_is_held_to_eight_minutes_too():
    lines = speedrun_section(speedrun_results(1000.0, 1000.0, 1000.0, auto=(470.0, 480.0, 400.0)))
    assert lines.index("### Precision auto (bf16)") < lines.index("### Precision fp32")
    assert ("(the slowest of 3 seed(s), 0.148, 8.0 min; the goals, the slowest of 3: fast / series at most 0.25:"
            " met; the fast recipe at most 8 min: met)") in lines
    assert lines[-2].endswith("fast / series at most 0.25: NOT met)")  # fp32: 0.309, and no minutes goal
    lines = speedrun_section(speedrun_results(700.0, 700.0, 700.0, auto=(481.0, 400.0, 400.0)))
    assert ("(the slowest of 3 seed(s), 0.149, 8.0 min; the goals, the slowest of 3: fast / series at most 0.25:"
            " met; the fast recipe at most 8 min: NOT met)") in lines
    assert "The series: its recorded 9.38M tokens to the target (docs/runs/series.csv, interpolated between its" \
        " evaluations) at its step's 2,900 tokens/s measured here: **53.9 min**. The fast recipe's step: 4,400" \
        " tokens/s, side by side." in lines


def test_a_cpu_with_bf16_units_keeps_its_train_figures_when_its_speedrun_is_recorded(tmp_path, monkeypatch):
    kept = tmp_path / "cpu_bf16_results.json"
    train = train_results(plain_fp32=1.0, project_fp32=1.3, **{"project_auto(bf16)": 3.08})
    kept.write_text(json.dumps({"machine": run.machine(), "cpu": run.cpu_summary(), "date": "2026-12-01",
                                "train": train}))
    page = tmp_path / "BENCHMARKS.md"
    monkeypatch.setattr(run, "CPU_BF16_RESULTS", kept)
    monkeypatch.setattr(run, "cpu_has_bf16", lambda: True)
    monkeypatch.setitem(run.SUITES, "speedrun", lambda: speedrun_results(1000.0, 1100.0, 1050.0))
    run.record_cpu_bf16(page, ["speedrun"])
    record, today = json.loads(kept.read_text()), datetime.date.today().isoformat()
    assert (record["train"], record["speedrun"]["precisions"][0]["fast_over_series"]) == \
        ({**train, "date": "2026-12-01"}, 1100.0 / 3_234.5)
    assert (record["date"], record["speedrun"]["date"]) == (today, today)
    text = page.read_text()
    assert f"## Training step on a CPU with bf16 units: {run.machine()} (2026-12-01)" in text  # when it was measured
    assert f"CPU flags {run.cpu_summary()} ({today})" in text and "fast / series time to target: 0.34" in text
    with pytest.raises(SystemExit, match="^benchmarks.run: --cpu-bf16 measures train, speedrun; not sample$"):
        run.record_cpu_bf16(page, ["sample"])


def gpu_step_results(*graphs_rates: float) -> dict:
    """A GPU check's step record: eager at 500,000 tokens/s, CUDA graphs at each rate (the first this check's, the
    others earlier checks')."""
    def rates(graphs: float) -> list[dict]:
        return [{"mode": "eager", "tokens_per_sec": 500_000.0, "ms_per_step": 16.4, "first_steps_s": 0.7},
                {"mode": "reduce-overhead", "tokens_per_sec": graphs, "ms_per_step": 16.4 * 5e5 / graphs,
                 "first_steps_s": 15.0}]
    first, *earlier = graphs_rates
    return {"check": "second", "preset": "holmes", "batch_size": 32, "precision": "bf16", "rates": rates(first),
            "command": "python -m benchmarks.bench_gpu_step --device cuda",
            "profile": {"kernel_ms_per_step": 4.58, "kernel_launches_per_step": 427.0},
            "earlier": [{"check": f"earlier {i}", "rates": rates(r)} for i, r in enumerate(earlier, 1)]}


def test_the_gpu_step_goal_is_held_to_every_checks_cuda_graph_rate():
    lines = run.gpu_step_section(gpu_step_results(1_812_880.0, 2_237_980.0))
    assert "| second | CUDA graphs (`compile_mode: reduce-overhead`) | 1,812,880 | 4.52 | 3.63x | 15.0 s |" in lines
    assert "| earlier 1 | eager | 500,000 | 16.40 | 1.00x | 0.7 s |" in lines
    assert ("Goal (issue 27: at least 2,000,000 tokens/s at batch 32): 1,812,880 (second), 2,237,980 (earlier 1):"
            " met in 1 of 2 checks.") in lines
    lines = run.gpu_step_section(gpu_step_results(1_999_999.0))
    assert "Goal (issue 27: at least 2,000,000 tokens/s at batch 32): 1,999,999 (second): met in 0 of 1 checks." in lines


def test_the_cuda_graph_time_to_target_reads_its_range_and_the_speed_up_over_eager():
    graphs = {"command": "bench", "limit_s": [165, 225],
              "series": {"step": 1120, "tokens": 9_175_040, "val_loss_full": [3.7550, 3.7543], "train_sec": [7, 8]},
              "fast": {"step": 960, "train_sec": [38, 37], "eager_train_sec": 23, "compile_sec": 15}}
    (text,) = run.gpu_graphs_paragraph(graphs, 3.76, 18.3)
    assert "neither run ended within its part's limit of 165 and 225 s" in text
    assert "reached 3.76 at step 1,120 (9.18M tokens; whole split 3.7550, 3.7543) in **7-8 s** of training" in text
    assert "about 2.4x sooner than eager" in text and "38/37 s of training at step 960 against eager's 23 s" in text


def gpu_run(seed: int, step: int | None, seconds: float | None) -> dict:
    reached = step is not None
    return {"seed": seed, "steps": 1008, "reached": reached, "best_val_loss": 3.75, "step": step,
            "tokens": step and step * 4096, "train_sec": seconds, "val_loss_full": 3.7512 if reached else None}


@pytest.mark.parametrize("fast_sec, verdict", [
    (9.0, "The fast recipe: **0.50** of the series' eager time (the slowest fast seed: 9.0 s against 18.0 s); goal"
          " at most 0.5: **met**."),
    (9.5, "The fast recipe: **0.53** of the series' eager time (the slowest fast seed: 9.5 s against 18.0 s); goal"
          " at most 0.5: **not met**."),
])
def test_the_gpu_speedrun_by_precision_is_held_to_half_the_series_eager_time(fast_sec, verdict):
    """scripts/gpu_check.sh's speedrun part (the benchmark's JSON by precision) on the page: each run a row, the
    slowest fast seed against the series' eager time."""
    at = {"precision": "auto", "resolved_precision": "bf16", "series_run": gpu_run(1337, 1120, 18.0),
          "fast_runs": [gpu_run(1337, 1120, fast_sec)], "series_tokens_per_sec": 510_000.0,
          "fast_step_tokens_per_sec": 1_900_000.0, "series_sec_to_target": 18.0, "fast_slowest_sec": fast_sec,
          "fast_over_series": fast_sec / 18.0}
    missed = {**at, "precision": "fp32", "resolved_precision": "fp32", "fast_runs": [gpu_run(1337, None, None)],
              "fast_slowest_sec": None, "fast_over_series": None}
    sp = {"target": 3.76, "device": "cuda", "compile_mode": None, "threads": 16,
          "fast_options": {"compile": True, "compile_mode": "reduce-overhead"}, "precisions": [at, missed]}
    lines = run.gpu_speedrun_section(sp)
    assert lines[0] == "### Time to holmes 3.76 on the GPU: both recipes trained to it, by precision"
    assert "The fast recipe as it is on this device: compile True, compile_mode reduce-overhead." in lines[2]
    assert "| series (eager), 1337 | 1120 | 4.59M | 18.0 s | 3.7512 | 510,000 |" in lines
    assert verdict in lines
    assert "| fast, 1337 | not in 1008 steps | | | | 1,900,000 |" in lines
    assert "The fast recipe: not measured: a run did not reach the target." in lines
    assert lines.index("Precision auto (bf16):") < lines.index("Precision fp32:")


def test_a_speedrun_of_one_precision_keeps_the_others_recorded_each_with_its_date(tmp_path, monkeypatch):
    """``--speedrun-precisions auto --cpu-bf16``: the new auto figures replace the old, fp32's stay, dated as before."""
    kept = tmp_path / "cpu_bf16_results.json"
    old = {**speedrun_results(1000.0, 1000.0, 1000.0, auto=(700.0, 700.0, 700.0)), "date": "2026-12-01"}
    kept.write_text(json.dumps({"machine": run.machine(), "cpu": run.cpu_summary(), "date": "2026-12-01",
                                "speedrun": old}))
    monkeypatch.setattr(run, "CPU_BF16_RESULTS", kept)
    monkeypatch.setattr(run, "cpu_has_bf16", lambda: True)
    only_auto = speedrun_results(1.0, auto=(600.0, 650.0, 640.0))
    only_auto["precisions"] = only_auto["precisions"][:1]
    monkeypatch.setitem(run.SUITES, "speedrun", lambda: only_auto)
    run.record_cpu_bf16(tmp_path / "BENCHMARKS.md", ["speedrun"])
    record, today = json.loads(kept.read_text()), datetime.date.today().isoformat()
    assert [(at["precision"], at["fast_slowest_sec"], at["date"]) for at in record["speedrun"]["precisions"]] == \
        [("auto", 650.0, today), ("fp32", 1000.0, "2026-12-01")]
    text = (tmp_path / "BENCHMARKS.md").read_text()
    assert f"### Precision auto (bf16) ({today})" in text and "### Precision fp32 (2026-12-01)" in text
