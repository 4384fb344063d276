"""BENCHMARKS.md's training-step section (benchmarks/run.py): each kind of CPU is held to its own goal."""

from __future__ import annotations

import math

from benchmarks.run import train_section

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
