"""The training loop's guards: a NaN or infinite loss stops the run before the weights change; early
stopping; the overfitting rule the alerts use. Real Trainer runs on the corpus slice (CPU, seconds)."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from tinygpt.checkpoint import read_checkpoint
from tinygpt.records import Callbacks, OverfitWatch
from tinygpt.train import DeferredGuard, NonFiniteLoss, Trainer, check_finite


class PoisonAt(Callbacks):
    """Sets one weight to NaN after step ``step``: the next step's loss is NaN. Keeps a copy of every
    weight and of the optimizer's state as they were then."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.trainer: Trainer | None = None
        self.weights: dict[str, torch.Tensor] = {}
        self.adam_steps: list[float] = []

    def on_progress(self, step: int) -> None:
        if step == self.step:
            with torch.no_grad():
                self.trainer.model.head.weight[0, 0] = math.nan
            self.weights = {k: v.clone() for k, v in self.trainer.model.state_dict().items()}
            self.adam_steps = [float(s["step"]) for s in self.trainer.optimizer.state.values()]


def deferred(trainer: Trainer) -> None:
    """The GPU's guard on the CPU: the fused AdamW (which can skip its update on the device) and the deferred
    check, as a CUDA run gets them (``DeferredGuard.suits``)."""
    groups = [{"params": g["params"], "weight_decay": g["weight_decay"]} for g in trainer.optimizer.param_groups]
    trainer.optimizer = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95), fused=True)
    trainer.guard = DeferredGuard()


@pytest.mark.parametrize("guard", ["synced", "deferred"])
def test_a_nan_loss_stops_the_run_before_the_optimizer_touches_the_weights(tiny_config, tmp_path, cache_dir, guard):
    """Synced (a host sync each step): the run stops inside step 8. Deferred (GPUs): step 8's update is skipped on
    the device and the run stops a step later, with the same story; neither lets a weight move."""
    callbacks = PoisonAt(step=7)
    trainer = Trainer(tiny_config(steps=40, eval_every=5, eval_batches=2), tmp_path, callbacks=callbacks,
                      cache_dir=cache_dir)
    if guard == "deferred":
        deferred(trainer)
    callbacks.trainer = trainer
    with pytest.raises(NonFiniteLoss) as caught:
        trainer.run()
    best = read_checkpoint(tmp_path / "best.pt")
    last_finite = dict(trainer.recent_losses)[7]
    assert str(caught.value) == (
        f"loss became NaN at step 8 (last finite train loss {float(last_finite):.2f} at step 7); "
        f"best checkpoint kept (step {best['train_state']['best_step']}, val {best['train_state']['best_val_loss']:.2f})")
    assert caught.value.step == 8
    assert best["train_state"]["best_step"] == 5 and trainer.state.step == (7 if guard == "synced" else 8)
    after = trainer.model.state_dict()
    for name, before in callbacks.weights.items():  # not one weight moved, NaN included
        torch.testing.assert_close(after[name], before, equal_nan=True, rtol=0, atol=0, msg=name)
    assert [float(s["step"]) for s in trainer.optimizer.state.values()] == callbacks.adam_steps


def test_the_deferred_guard_suits_a_cuda_run_with_the_fused_adamw_and_no_scaler():
    param = torch.nn.Parameter(torch.zeros(2))
    fused, foreach = (torch.optim.AdamW([param], fused=f, foreach=not f) for f in (True, False))
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert DeferredGuard.suits(cuda, fused, None)
    assert not DeferredGuard.suits(cpu, fused, None)  # the CPU's step is not launch-bound: a sync costs nothing
    assert not DeferredGuard.suits(cuda, foreach, None)  # it cannot skip its update on the device
    assert not DeferredGuard.suits(cuda, fused, torch.amp.GradScaler("cpu"))  # fp16: the scaler decides


def test_the_deferred_guard_flags_a_step_and_says_it_one_step_later():
    param = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.AdamW([param], lr=0.1, fused=True)
    guard, one, nan = DeferredGuard(), torch.tensor(1.0), torch.tensor(math.nan)
    param.grad = torch.ones(3)
    guard.step(optimizer, one, one, step=1)
    moved = param.detach().clone()
    assert not torch.equal(moved, torch.ones(3))  # a finite step updates
    param.grad = torch.full((3,), math.nan)
    guard.step(optimizer, one, nan, step=2)  # no sync, no raise yet: the update is skipped on the device
    assert torch.equal(param.detach(), moved)
    param.grad = torch.ones(3)
    with pytest.raises(NonFiniteLoss, match="^gradient norm became nan$") as caught:
        guard.step(optimizer, one, one, step=3)
    assert caught.value.step == 2
    guard.step(optimizer, nan, one, step=4)
    with pytest.raises(NonFiniteLoss, match="^loss became nan$"):
        guard.flush()
    guard.step(optimizer, nan, one, step=5, distributed=True)  # a rank's loss: the norm (all ranks') decides
    guard.flush()


def test_check_finite_names_what_went_wrong():
    one, nan, inf = torch.tensor(1.0), torch.tensor(math.nan), torch.tensor(math.inf)
    check_finite(one, one)  # finite: nothing to say
    with pytest.raises(NonFiniteLoss, match="^loss became nan$"):
        check_finite(nan, nan)
    with pytest.raises(NonFiniteLoss, match="^gradient norm became inf$"):
        check_finite(one, inf)
    with pytest.raises(NonFiniteLoss, match="^loss became inf$"):
        check_finite(inf, None)  # fp16: the scaler handles the gradients, the loss is checked
    # distributed: only the gradient norm (the same on every rank) decides, so ranks stop together
    check_finite(nan, one, distributed=True)
    with pytest.raises(NonFiniteLoss, match="^gradient norm became nan$"):
        check_finite(nan, nan, distributed=True)


def test_grad_clip_zero_means_no_clipping(tiny_config, tmp_path, cache_dir):
    """grad_clip 0 once zeroed every gradient (a clip to norm 0): without weight decay the weights never
    moved. Now it only measures the norm."""
    first = Trainer(tiny_config(steps=3, grad_clip=0.0, weight_decay=0.0), tmp_path / "a", cache_dir=cache_dir)
    before = first.model.head.weight.detach().clone()
    first.run()
    assert not torch.equal(first.model.head.weight, before)


def test_early_stopping_ends_the_run_with_its_reason(tiny_config, tmp_path, cache_dir):
    """lr 1e-7 cannot lower the validation loss by 0.01: two evaluations after step 0 and it stops."""
    config = tiny_config(steps=40, eval_every=5, eval_batches=2, lr=1e-7, early_stop_patience=2,
                         early_stop_min_delta=0.01, sample_tokens=0)
    result = Trainer(config, tmp_path, cache_dir=cache_dir).run()
    assert result.steps_done == 10 and not result.stopped
    assert result.stop_reason == (f"stopped early at step 10: validation loss has not improved by 0.01 for 2 evaluations; "
                                  f"best step {result.best_step} (val {result.best_val_loss:.2f})")
    assert (tmp_path / "last.pt").exists()  # a normal end: resumable files as after any run


def test_without_patience_the_run_goes_to_its_last_step(tiny_config, tmp_path, cache_dir):
    result = Trainer(tiny_config(steps=10, eval_every=5, eval_batches=2, lr=1e-7, sample_tokens=0), tmp_path,
                     cache_dir=cache_dir).run()
    assert result.steps_done == 10 and result.stop_reason is None


def test_early_stopping_counts_across_a_resume(tiny_config, tmp_path, cache_dir):
    """The count of evaluations without improvement is in the checkpoint: a resumed run goes on counting."""
    config = tiny_config(steps=40, eval_every=5, eval_batches=2, lr=1e-7, early_stop_patience=3,
                         early_stop_min_delta=0.01, sample_tokens=0)

    class StopAfter(Callbacks):
        def should_stop(self) -> bool:
            return trainer.state.step == 10  # preempted after 2 evaluations without improvement

    trainer = Trainer(config, tmp_path, callbacks=StopAfter(), cache_dir=cache_dir)
    assert trainer.run().stopped
    resumed = Trainer(config, tmp_path, cache_dir=cache_dir, resume=True)
    assert resumed.state.evals_without_improvement == 2
    assert resumed.run().steps_done == 15


def test_overfit_watch_fires_once_at_the_second_evaluation_above_the_best():
    watch = OverfitWatch()
    seen = [watch.update(step, val) for step, val in [(0, 5.0), (10, 4.0), (20, 4.1), (30, 3.9), (40, 4.0),
                                                       (50, 4.2), (60, 4.3)]]
    assert seen == [False, False, False, False, False, True, False]
    assert (watch.since, watch.best_step, watch.best) == (40, 30, 3.9)


@pytest.mark.slow  # 25 s on 2 cores: a real `tinygpt train` up to its divergence
def test_tinygpt_train_reports_a_divergence_in_one_line_and_exits_1(tmp_path, slice_path, monkeypatch):
    """fp16 at lr 1 overflows within the warm-up: the command says where and exits 1 (no 'done')."""
    monkeypatch.setenv("TINYGPT_HOME", str(tmp_path / "home"))
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "app.cli", "train", "--preset", "tiny", "--corpus", str(slice_path),
                           "--vocab-size", "512", "--device", "cpu", "--precision", "fp16", "--lr", "1",
                           "--warmup", "100", "--steps", "200", "--eval-every", "5", "--eval-batches", "2",
                           "--batch-size", "8", "--threads", "1", "--sample-tokens", "0", "--no-progress",
                           "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("tinygpt train: ") and " became " in last and f"; files in {out}" in last
    assert "done:" not in proc.stdout
