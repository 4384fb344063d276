"""The time-to-target benchmark (benchmarks/bench_speedrun.py): the series' tokens to target read from its
recorded run, and a run stopped at the evaluation that first reaches its target."""

from __future__ import annotations

import pytest

from benchmarks.bench_speedrun import SERIES_CSV, StopAtTarget, tokens_to_target
from benchmarks.common import random_tokens
from tinygpt.records import read_metrics_csv
from tinygpt.run_config import TrainConfig
from tinygpt.train import Trainer


def test_the_series_tokens_to_target_lie_between_its_evaluations_around_it():
    rows = read_metrics_csv(SERIES_CSV)
    evals = {m.step: m for m in rows if m.val_loss is not None}
    before, after = evals[1000], evals[1250]  # 3.794 and 3.735: the evaluations around 3.76
    assert before.val_loss > 3.76 >= after.val_loss
    share = (before.val_loss - 3.76) / (before.val_loss - after.val_loss)
    assert tokens_to_target(rows, 3.76) == pytest.approx(before.tokens_seen + share * (after.tokens_seen - before.tokens_seen))
    with pytest.raises(ValueError, match="^the validation loss never crosses 2.0$"):
        tokens_to_target(rows, 2.0)


def test_a_run_stops_at_the_evaluation_whose_whole_split_first_reaches_the_target(tiny_config, tmp_path, cache_dir):
    target = 6.6  # the tiny model on the slice passes it well within its 40 steps
    stop = StopAtTarget(target)
    result = Trainer(tiny_config(eval_every=5, target_val_loss=target), tmp_path, callbacks=stop,
                     cache_dir=cache_dir).run()
    reached = stop.reached
    assert reached is not None and reached.exact and reached.val_loss <= target
    assert result.stopped and result.steps_done == reached.step < 40
    earlier = [m for m in read_metrics_csv(tmp_path / "metrics.csv") if m.step < reached.step]
    assert all(m.val_loss_full is None or m.val_loss_full > target for m in earlier)


def test_the_benchmarks_random_tokens_come_with_a_tokenizer_that_defines_every_one(tmp_path):
    tokens, tokenizer = random_tokens(4096, 5_000)
    assert tokenizer.vocab_size == 4096 and int(tokens.max()) == 4095 and int(tokens.min()) == 0
    trainer = Trainer(TrainConfig(preset="tiny", device="cpu", steps=1, sample_tokens=0), tmp_path, tokens=tokens,
                      tokenizer=tokenizer)  # the step-rate benchmarks' trainers (bytes per token needs every id)
    val = trainer.splits.val
    assert trainer.val_bytes_per_token == pytest.approx(float((val >= 256).float().mean()) + 1)  # bytes: 1 or 2


def test_the_gpu_step_benchmark_times_a_step_and_profiles_it_on_any_device():
    """benchmarks/bench_gpu_step.py, run here on the CPU (scripts/gpu_check.sh runs it on a GPU): the rate and the
    milliseconds describe the same step, and the profile lists the step's operators (no kernels on a CPU)."""
    from benchmarks.bench_gpu_step import profile_eager, step_rate

    rate = step_rate("eager", "tiny", 2, "fp32", "cpu", rounds=1, steps=2)
    assert rate["mode"] == "eager" and rate["tokens_per_sec"] > 0 and rate["first_steps_s"] > 0
    assert rate["tokens_per_sec"] * rate["ms_per_step"] / 1e3 == pytest.approx(2 * 128)  # the tiny preset's context
    profile = profile_eager("tiny", 2, "fp32", "cpu", steps=2)
    assert profile["kernel_ms_per_step"] == 0 and profile["kernel_launches_per_step"] == 0
    assert "aten::mm" in profile["top_host_ops"] and profile["profiled_wall_ms_per_step"] > 0


def test_an_op_under_the_optimizers_step_counts_as_the_optimizers():
    from types import SimpleNamespace as Op

    from benchmarks.bench_speedrun import OPTIMIZER_PART, step_part

    step = Op(name="Optimizer.step#Muon.step", cpu_parent=None)
    assert step_part(Op(name="aten::bmm", cpu_parent=Op(name="aten::matmul", cpu_parent=step))) == OPTIMIZER_PART
    assert step_part(step) == OPTIMIZER_PART
    assert step_part(Op(name="aten::bmm", cpu_parent=None)) == "matrix products"
    assert step_part(Op(name="aten::_scaled_dot_product_flash_attention_for_cpu_backward", cpu_parent=None)) == \
        "attention (fused kernel)"
    assert step_part(Op(name="aten::copy_", cpu_parent=Op(name="aten::to", cpu_parent=None))) == "everything else"


def test_the_series_bf16_record_needs_the_tokens_of_its_fp32_record():
    """Why the benchmark may take the series' bf16 run (an H200's) for a CPU where auto means bf16: bf16 autocast
    cost the series no sample efficiency (9.39M tokens to 3.76 against fp32's 9.38M)."""
    from benchmarks.bench_speedrun import SERIES_RECORDS

    fp32, bf16 = (tokens_to_target(read_metrics_csv(SERIES_RECORDS[p]), 3.76) for p in ("fp32", "bf16"))
    assert (round(fp32 / 1e4), round(bf16 / 1e4)) == (938, 939)
