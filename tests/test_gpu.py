"""CUDA paths: run by scripts/gpu_check.sh on a machine with an NVIDIA GPU (marker ``gpu``).

Skipped (and deselected by default) everywhere else.
"""

from __future__ import annotations

import pytest
import torch

from tinygpt import device as dev
from tinygpt.bench import SweepConfig, sweep
from tinygpt.model import GPT
from tinygpt.presets import model_config
from tinygpt.records import read_metrics_csv
from tinygpt.sample import generate
from tinygpt.train import NonFiniteLoss, Trainer

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_cuda_is_resolved_and_described():
    device = dev.resolve_device("cuda")
    assert device.type == "cuda"
    info = dev.describe_device(device)
    assert info["type"] == "cuda" and info["name"] == torch.cuda.get_device_name(device)
    assert dev.resolve_precision("auto", device) == ("bf16" if torch.cuda.is_bf16_supported() else "fp16")
    listed = {d["device"]: d for d in dev.available_devices()}
    assert listed["cuda:0"]["available"]


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_training_in_each_precision_learns_and_reports_memory(tiny_config, tmp_path, precision):
    if precision == "bf16" and not torch.cuda.is_bf16_supported():
        pytest.skip("no bf16 on this GPU")
    config = tiny_config(device="cuda", precision=precision, steps=40, eval_every=20, batch_size=16)
    result = Trainer(config, tmp_path).run()
    rows = [m for m in read_metrics_csv(tmp_path / "metrics.csv") if m.val_loss is not None]
    assert result.precision == precision and result.device.startswith("cuda")
    assert rows[-1].val_loss < rows[0].val_loss - 0.5
    assert all(0 < m.peak_mem_mib < 8_000 for m in rows)


def test_a_cuda_run_checks_for_nan_a_step_late_and_no_weight_moves(tiny_config, tmp_path):
    """The deferred guard (no host sync a step): a NaN weight after step 7 stops the run, naming step 8, with
    every weight as it was."""
    from .test_guards import PoisonAt

    callbacks = PoisonAt(step=7)
    trainer = Trainer(tiny_config(device="cuda", precision="bf16" if torch.cuda.is_bf16_supported() else "fp32",
                                  steps=40, eval_every=5, eval_batches=2), tmp_path, callbacks=callbacks)
    callbacks.trainer = trainer
    assert trainer.guard is not None
    with pytest.raises(NonFiniteLoss) as caught:
        trainer.run()
    assert caught.value.step == 8 and str(caught.value).startswith("loss became NaN at step 8")
    after = trainer.model.state_dict()
    for name, before in callbacks.weights.items():
        torch.testing.assert_close(after[name], before, equal_nan=True, rtol=0, atol=0, msg=name)


def test_cuda_graphs_follow_the_eager_curve(tiny_config, tmp_path):
    """compile_mode reduce-overhead (CUDA graphs, for launch-bound small batches) trains the eager run's curve."""
    curves = {}
    for name, options in {"eager": {}, "graphs": {"compile": True, "compile_mode": "reduce-overhead"}}.items():
        config = tiny_config(device="cuda", precision="fp32", steps=40, eval_every=20, batch_size=8, **options)
        Trainer(config, tmp_path / name).run()
        curves[name] = [m.val_loss for m in read_metrics_csv(tmp_path / name / "metrics.csv") if m.val_loss]
    gaps = [abs(a - b) for a, b in zip(curves["eager"], curves["graphs"], strict=True)]
    assert len(gaps) == 3 and max(gaps) < 0.02, gaps


def test_the_muon_step_inside_the_cuda_graphs_follows_the_eager_curve(tiny_config, tmp_path):
    """compile_optimizer with reduce-overhead: Muon's and AdamW's step compiled and replayed with the CUDA graphs
    (the learning rates as tensors the schedule sets in place) trains the eager run's curve."""
    curves = {}
    for name, options in {"eager": {}, "graphs": {"compile": True, "compile_mode": "reduce-overhead",
                                                  "compile_optimizer": True}}.items():
        config = tiny_config(device="cuda", precision="fp32", steps=40, eval_every=20, batch_size=8,
                             optimizer="muon", **options)
        Trainer(config, tmp_path / name).run()
        curves[name] = [m.val_loss for m in read_metrics_csv(tmp_path / name / "metrics.csv") if m.val_loss]
    gaps = [abs(a - b) for a, b in zip(curves["eager"], curves["graphs"], strict=True)]
    assert len(gaps) == 3 and max(gaps) < 0.02, gaps


def test_cpu_and_gpu_curves_agree_for_the_same_seed_and_batches(tiny_config, tmp_path):
    curves = {}
    for device in ("cpu", "cuda"):
        config = tiny_config(device=device, precision="fp32", steps=60, eval_every=20, batch_size=8)
        Trainer(config, tmp_path / device).run()
        curves[device] = [m.val_loss for m in read_metrics_csv(tmp_path / device / "metrics.csv") if m.val_loss]
    assert len(curves["cpu"]) == len(curves["cuda"]) == 4
    gaps = [abs(a - b) for a, b in zip(curves["cpu"], curves["cuda"], strict=True)]
    assert max(gaps) < 0.02, gaps


def test_cached_sampling_matches_recompute_on_the_gpu():
    torch.manual_seed(0)
    model = GPT(model_config("tiny")).cuda().eval()
    cached = list(generate(model, [5, 6, 7], 40, temperature=0.8, seed=3))
    recomputed = list(generate(model, [5, 6, 7], 40, temperature=0.8, seed=3, use_cache=False))
    assert cached == recomputed


def test_benchmark_sweep_catches_out_of_memory_and_goes_on():
    huge = 1 << 17  # 131,072 sequences of 256: terabytes of logits
    cells = sweep(SweepConfig(preset="holmes", device="cuda", batch_sizes=[8, huge, 8], precisions=["bf16"],
                              steps=2, warmup=1))
    assert [c.oom for c in cells] == [False, True, False]
    assert cells[0].tokens_per_sec > 0 and cells[0].peak_mem_mib > 0
    assert cells[2].peak_mem_mib < 4 * cells[0].peak_mem_mib  # the failed cell's memory was handed back


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_two_gpus_follow_the_one_gpu_curve(tmp_path, slice_path):
    import subprocess
    import sys

    from tinygpt.distributed import torchrun_command

    args = ["train", "--preset", "tiny", "--corpus", str(slice_path), "--device", "cuda", "--precision", "fp32",
            "--steps", "20", "--batch-size", "16", "--eval-every", "10", "--seed", "3", "--no-progress"]
    subprocess.run([sys.executable, "-m", "tinygpt", *args, "--out", str(tmp_path / "one")], check=True)
    subprocess.run(torchrun_command(2, "tinygpt", *args, "--out", str(tmp_path / "two")), check=True)
    one = [m.val_loss for m in read_metrics_csv(tmp_path / "one" / "metrics.csv") if m.val_loss]
    two = [m.val_loss for m in read_metrics_csv(tmp_path / "two" / "metrics.csv") if m.val_loss]
    assert len(one) == len(two) == 3 and max(abs(a - b) for a, b in zip(one, two, strict=True)) < 0.02
