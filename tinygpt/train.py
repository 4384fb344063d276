"""The training loop: the series' recipe as a library function.

>>> result = train(TrainConfig(preset="tiny", corpus="holmes.txt", steps=200), out_dir="runs/t")  # doctest: +SKIP
>>> result.best_val_loss  # doctest: +SKIP
5.41

The recipe: the last 10% of tokens is validation; random windows of ``context``
tokens; AdamW (betas 0.9/0.95, weight decay on 2-D weights only); linear warmup for
``min(200, steps // 10)`` steps then cosine down to 10% of the peak (other optimizers and
schedules: :mod:`tinygpt.optimization`); gradient clip
1.0; evaluation = mean loss over 20 batches of each split (fewer between close evaluations:
``eval_batch_count``) from a generator seeded 0,
at step 0, every ``eval_every`` steps and at the end.

What a caller sees goes through :class:`Callbacks` (``on_step``, ``on_eval``,
``on_sample``, ``on_checkpoint``, ``should_stop``); the CLI prints from them and the
worker writes them to the database. The loop itself writes ``metrics.csv``,
``config.json``, ``tokenizer.json``, ``best.pt`` (each time validation improves)
and ``last.pt`` (at every evaluation and when stopped: the resume point).

In ``metrics.csv``, ``train_loss`` is that step's batch loss, except on evaluation
rows (those with a ``val_loss``) where it is the evaluation's estimate, measured the
same way as ``val_loss`` so that their difference (the overfitting gap) is fair.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel

from . import device as dev
from . import distributed
from .checkpoint import read_checkpoint, save_checkpoint
from .config import GPTConfig
from .corpus import known_target, load_or_train_tokenizer, read_corpus
from .data import Splits, encode_corpus, get_batch
from .distributed import rank_device
from .inside import head_scores
from .model import GPT
from .optimization import (
    Optimizer,
    compile_step,
    compiled_step,
    load_optimizer_state,
    lr_at,
    make_optimizer,
    parts,
    set_lr,
)
from .ranks import DistInfo
from .records import HEAD_SCORES_FILE, Callbacks, MetricsCsv, Sample, StepMetrics, append_head_scores
from .run_config import TrainConfig
from .sample import sample_text
from .tokenizer import Tokenizer

log = logging.getLogger(__name__)


class NonFiniteLoss(RuntimeError):
    """A step's loss or gradient norm was NaN or infinite: the run stops before the optimizer changes the
    weights. The Trainer re-raises it with the whole story (step, last finite loss, best checkpoint)."""

    def __init__(self, what: str, value: float, message: str | None = None, *, step: int | None = None) -> None:
        self.what, self.value, self.step = what, value, step  # step: set when known here (the deferred guard's)
        super().__init__(message or f"{what} became {value}")


#: fp16 with a gradient scaler: a step with overflowing gradients is skipped (and the scale halved),
#: which is normal now and then; this many skipped in a row is a run that has diverged.
MAX_SKIPPED_STEPS = 25


@dataclass
class TrainResult:
    steps_done: int
    stopped: bool
    best_val_loss: float | None
    best_step: int | None
    final: StepMetrics | None
    device: str
    precision: str
    out_dir: Path
    info: dict = field(default_factory=dict)
    stop_reason: str | None = None  # early stopping: why the run ended before its last step


def training_loss(logits: torch.Tensor, targets: torch.Tensor, config: TrainConfig) -> torch.Tensor:
    """The loss the optimizer minimises: next-token cross-entropy. (Evaluations measure the model's
    own cross-entropy, so validation losses stay comparable whatever the training options.)

    logits: (B, T, vocab); targets: (B, T).
    """
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1),  # mean over B*T
                           label_smoothing=config.label_smoothing)


def train_step(
    model: nn.Module,
    optimizer: Optimizer,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    *,
    device: torch.device,
    precision: str,
    config: TrainConfig,
    scaler: torch.amp.GradScaler | None = None,
    guard: DeferredGuard | None = None,
    step: int = 0,
) -> torch.Tensor:
    """One optimizer update over ``config.grad_accum`` micro-batches (x, y); returns the mean loss, detached.
    ``guard``: check for a NaN without a host sync (:class:`DeferredGuard`); ``step``: this update's number, for
    its message.

    The training loop and the hardware benchmark both run this, so a benchmark measures the
    step that training runs.
    """
    grad_accum = config.grad_accum
    total = torch.zeros((), device=device)
    graphs = config.compile and config.compile_mode == "reduce-overhead"
    for x, y in batches:
        if graphs:  # a new iteration: the CUDA graphs' last outputs may be overwritten (total holds a copy)
            torch.compiler.cudagraph_mark_step_begin()
        with dev.autocast(device, precision):
            logits, _ = model(x)  # (B, T, vocab)
            loss = training_loss(logits, y, config)
        loss = loss / grad_accum
        (scaler.scale(loss) if scaler else loss).backward()
        total += loss.detach().float()
    if scaler:
        for part in parts(optimizer):
            scaler.unscale_(part)
    # grad_clip 0: no clipping (an infinite bound only measures the norm)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip or math.inf)
    distributed = isinstance(model, DistributedDataParallel)
    if scaler:
        # overflowing gradients are the scaler's to handle (it skips the step and lowers its scale); a
        # non-finite loss is an overflow in the forward pass itself, which no scale can fix
        check_finite(total, None, distributed=distributed)
        for part in parts(optimizer):
            scaler.step(part)
        scaler.update()
    elif guard is not None:
        guard.step(optimizer, total, norm, step, distributed=distributed)
    else:
        check_finite(total, norm, distributed=distributed)
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    dev.xla_step(device)
    return total


def compile_model(model: nn.Module, mode: str) -> nn.Module:
    """``torch.compile`` in ``mode`` (:data:`~tinygpt.run_config.COMPILE_MODES`): ``reduce-overhead`` replays the
    step's kernels as CUDA graphs on a GPU, one launch instead of hundreds (a CPU compiles it without graphs)."""
    return torch.compile(model, mode=None if mode == "default" else mode)


def check_finite(loss: torch.Tensor, grad_norm: torch.Tensor | None, *, distributed: bool = False) -> None:
    """Raise NonFiniteLoss for a NaN or infinite loss or gradient norm (one host sync per step). In a
    distributed run only the gradient norm decides: it is the same on every rank after the all-reduce
    (a rank's NaN loss makes every rank's gradients NaN), so all ranks stop together; the loss is
    checked where it is logged, on rank 0."""
    norm = grad_norm.float() if grad_norm is not None else torch.zeros((), device=loss.device)
    values = torch.stack([norm, loss.float()]).tolist()  # [norm, loss]: one sync
    if not math.isfinite(values[0]) and (distributed or math.isfinite(values[1])):
        raise NonFiniteLoss("gradient norm", values[0])
    if not math.isfinite(values[1]) and not distributed:
        raise NonFiniteLoss("loss", values[1])


class DeferredGuard:
    """The NaN guard without a host sync every step, for GPUs (a sync drains the launch queue, and a small batch's
    step is launch-bound). The fused AdamW skips its update on the device when the step's loss or gradient norm is
    not finite (its ``found_inf`` input, which the gradient scaler uses the same way), and that flag is read on the
    host a step later, once that step has finished and the next is already queued: the weights never take a
    non-finite update, and NonFiniteLoss names the step (``.step``) whose update was skipped."""

    def __init__(self) -> None:
        self.pending: tuple[int, torch.Tensor, torch.Tensor, torch.Tensor, bool] | None = None

    @staticmethod
    def suits(device: torch.device, optimizer: Optimizer, scaler: torch.amp.GradScaler | None) -> bool:
        """A CUDA run with the fused AdamW (one that can skip its update on the device) and no gradient scaler
        (fp16's, which decides skipping itself)."""
        return (device.type == "cuda" and scaler is None and isinstance(optimizer, torch.optim.AdamW)
                and bool(optimizer.defaults.get("fused")))

    def step(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor, norm: torch.Tensor, step: int, *,
             distributed: bool = False) -> None:
        """The update, skipped on the device if this step is not finite; then the previous step's verdict. In a
        distributed run the gradient norm alone decides (the same on every rank, as in :func:`check_finite`)."""
        bad = ~torch.isfinite(norm) if distributed else ~torch.isfinite(norm) | ~torch.isfinite(loss)  # ()
        optimizer.found_inf = bad.float()  # type: ignore[attr-defined]
        try:
            optimizer.step()
        finally:
            del optimizer.found_inf  # type: ignore[attr-defined]
        previous, self.pending = self.pending, (step, bad, loss, norm, distributed)
        if previous is not None:
            self.raise_if_bad(*previous)

    def flush(self) -> None:
        """The last step's verdict now (before a log row, an evaluation or the end)."""
        previous, self.pending = self.pending, None
        if previous is not None:
            self.raise_if_bad(*previous)

    @staticmethod
    def raise_if_bad(step: int, bad: torch.Tensor, loss: torch.Tensor, norm: torch.Tensor, distributed: bool) -> None:
        if bad.item():  # the host waits for that step only now, when the next one is queued
            try:
                check_finite(loss, norm, distributed=distributed)  # what to call it: the synced guard's words
            except NonFiniteLoss as exc:
                raise NonFiniteLoss(exc.what, exc.value, step=step) from None


def warm_up() -> None:
    """Pay a process's first-use costs before its run arrives: one CPU step of a 1-layer model through
    ``train_step``. Building the first optimizer imports torch._dynamo (1.5-2.5 s on a laptop CPU),
    and the first forward and backward load their kernels. A warm job process calls this while waiting."""
    config = TrainConfig(steps=1, precision="fp32")
    model = GPT(GPTConfig(vocab_size=64, context=8, d_model=16, n_heads=2, n_layers=1))
    optimizer = make_optimizer(model, config, torch.device("cpu"))
    x = torch.randint(0, 64, (2, 8))  # (B, T)
    train_step(model, optimizer, [(x, x)], device=torch.device("cpu"), precision="fp32", config=config)


@torch.no_grad()
def estimate_loss(
    model: nn.Module, splits: Splits, config: TrainConfig, context: int, device: torch.device, precision: str
) -> dict[str, float]:
    """Mean loss over ``eval_batch_count()`` batches of each split, the same batches every time (seed 0)."""
    was_training = model.training
    model.eval()
    out = {}
    batches = config.eval_batch_count()
    for name, tokens in (("train", splits.train), ("val", splits.val)):
        generator = torch.Generator().manual_seed(0)
        total = torch.zeros((), device=device)
        for _ in range(batches):
            x, y = get_batch(tokens, config.batch_size, context, generator, device)
            with dev.autocast(device, precision):
                _, loss = model(x, y)
            total += loss.float()
        out[name] = float(total) / batches
    model.train(was_training)
    return out


#: An evaluation whose estimate is within this of the target measures the whole validation split,
#: which decides whether the target is reached (the estimate's own error on holmes is about 0.02).
TARGET_MARGIN = 0.05


@torch.no_grad()
def full_val_loss(model: nn.Module, val: torch.Tensor, context: int, batch_size: int, device: torch.device,
                  precision: str) -> float:
    """The mean loss over the whole validation split: consecutive windows of ``context`` tokens, each token
    predicted once (the last ``< context`` tokens excepted)."""
    was_training = model.training
    model.eval()
    windows = (len(val) - 1) // context
    starts = torch.arange(windows) * context  # (W,)
    offsets = torch.arange(context)  # (T,)
    total = torch.zeros((), device=device)
    for chunk in starts.split(batch_size):
        index = chunk[:, None] + offsets[None, :]  # (B, T)
        x, y = val[index].to(device), val[index + 1].to(device)
        with dev.autocast(device, precision):
            _, loss = model(x, y)  # mean over B*T
        total += loss.float() * len(chunk)
    model.train(was_training)
    return float(total) / windows


def bytes_per_token(tokens: torch.Tensor, tokenizer: Tokenizer) -> float:
    """The text bytes one token of ``tokens`` stands for, on average (bits per byte = loss / ln 2 / this)."""
    lengths = torch.tensor([len(tokenizer.token_bytes(i)) for i in range(tokenizer.vocab_size)])
    return float(lengths[tokens.long()].sum()) / len(tokens)


@dataclass
class _State:
    """What changes during a run and must survive a resume."""

    step: int = 0
    tokens_seen: int = 0
    elapsed_sec: float = 0.0
    best_val_loss: float | None = None
    best_step: int | None = None
    evals_without_improvement: int = 0  # early stopping's count (by at least early_stop_min_delta)
    target_step: int | None = None  # the evaluation whose whole-split loss first reached the target


class Trainer:
    """One run: built from a config and an output folder, executed by :meth:`run`."""

    def __init__(
        self,
        config: TrainConfig,
        out_dir: str | Path,
        *,
        callbacks: Callbacks | None = None,
        cache_dir: str | Path | None = None,
        resume: bool = False,
        tokens: torch.Tensor | None = None,
        tokenizer: Tokenizer | None = None,
        dist: DistInfo | None = None,
    ) -> None:
        self.config = config.validate()
        self.dist = dist or DistInfo()
        if self.dist.enabled and config.batch_size % self.dist.world_size:
            raise ValueError(f"batch_size {config.batch_size} must divide evenly over {self.dist.world_size} processes")
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.cb = (callbacks or Callbacks()) if self.dist.is_main else Callbacks()  # rank 0 reports
        dev.set_threads(config.threads)
        dev.keep_freed_memory()
        self.device = dev.resolve_device(rank_device(config.device, self.dist))
        distributed.start(self.dist, self.device)
        self.precision = dev.resolve_precision(config.precision, self.device)
        self.model_config = config.model_config()
        self.target: float | None = config.target_val_loss or None  # 0: none
        self.tokenizer, tokens = self._load_data(tokenizer, tokens, Path(cache_dir) if cache_dir else None)
        self.splits = Splits.from_tokens(tokens, self.model_config.context)
        self.val_bytes_per_token = bytes_per_token(self.splits.val, self.tokenizer)

        torch.manual_seed(config.seed)  # init on the CPU: the same weights on every device
        self.model = GPT(self.model_config)
        self.dropout_on = True  # as built: the configured dropout (set_dropout changes it)
        self.model.gradient_checkpointing = config.grad_checkpointing
        self.model.to(self.device)
        self.optimizer = make_optimizer(self.model, config, self.device)
        self.scaler = torch.amp.GradScaler(self.device.type) if self.precision == "fp16" else None
        self.guard = DeferredGuard() if DeferredGuard.suits(self.device, self.optimizer, self.scaler) else None
        self.batch_gen = torch.Generator().manual_seed(config.seed)
        self.state = _State()
        # (step, loss) of the last steps taken: the story's "last finite" one is the newest before the bad step
        # (the deferred guard learns of a bad step one step late)
        self.recent_losses: deque[tuple[int, torch.Tensor]] = deque(maxlen=3)
        self.skipped_in_a_row = 0  # fp16: steps the gradient scaler skipped in a row
        resume_from = self.out_dir / "last.pt"
        self.resumed = resume and resume_from.exists()
        if self.resumed:
            self._restore(resume_from)
        trained: nn.Module = self.model
        if self.dist.enabled:  # gradients averaged across ranks in backward
            ids = [self.device.index] if self.device.type == "cuda" else None
            trained = DistributedDataParallel(self.model, device_ids=ids, broadcast_buffers=False)
        self.forward_model = compile_model(trained, config.compile_mode) if config.compile else trained
        if compiled_step(config):
            compile_step(self.optimizer, config.compile_mode)
        self.eval_model = self.model if self.dist.enabled else self.forward_model  # rank 0 alone: no collectives
        self.csv = MetricsCsv(self.out_dir / "metrics.csv", self.state.step if self.resumed else None) \
            if self.dist.is_main else None
        if self.dist.is_main:
            self.tokenizer.save(self.out_dir / "tokenizer.json")
            self._write_config_json()

    # -- setup ------------------------------------------------------------------------
    def _load_data(
        self, tokenizer: Tokenizer | None, tokens: torch.Tensor | None, cache_dir: Path | None
    ) -> tuple[Tokenizer, torch.Tensor]:
        if tokenizer is not None and tokens is not None:
            return tokenizer, tokens
        text = read_corpus(self.config.corpus)
        if self.config.target_val_loss is None:
            self.target = known_target(text)
        tokenizer = tokenizer or load_or_train_tokenizer(text, self.model_config.vocab_size, cache_dir)
        if tokenizer.vocab_size > self.model_config.vocab_size:
            raise ValueError(
                f"tokenizer has {tokenizer.vocab_size} ids but the model's vocabulary is {self.model_config.vocab_size}"
            )
        return tokenizer, encode_corpus(text, tokenizer, cache_dir)

    def info(self) -> dict:
        return {
            "device": str(self.device),
            "device_info": dev.describe_device(self.device),
            "precision": self.precision,
            "params": self.model.num_params(),
            "train_tokens": len(self.splits.train),
            "val_tokens": len(self.splits.val),
            "tokenizer_vocab": self.tokenizer.vocab_size,
            "start_step": self.state.step,
            "resumed": self.resumed,
            "target_val_loss": self.target,
            "val_bytes_per_token": self.val_bytes_per_token,
        }

    def _write_config_json(self) -> None:
        data = {
            "train": self.config.to_dict(),
            "model": self.model_config.to_dict(),
            "resolved": {"device": str(self.device), "precision": self.precision, "params": self.model.num_params(),
                         "target_val_loss": self.target, "val_bytes_per_token": self.val_bytes_per_token},
            "tokenizer": {"path": "tokenizer.json", "vocab_size": self.tokenizer.vocab_size},
        }
        (self.out_dir / "config.json").write_text(json.dumps(data, indent=2))

    # -- checkpoints ------------------------------------------------------------------
    def _checkpoint_state(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler else None,
            "step": self.state.step,
            "train_state": asdict(self.state),
            "model_config": self.model_config.to_dict(),
            "train_config": self.config.to_dict(),
            "tokenizer": self.tokenizer.to_dict(),
            "tokenizer_ref": {"path": "tokenizer.json", "fingerprint": self.tokenizer.fingerprint()},
            "best_val_loss": self.state.best_val_loss,
            "rng": {
                "batch": self.batch_gen.get_state(),
                "cpu": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if self.device.type == "cuda" else None,
            },
            "device": str(self.device),
            "precision": self.precision,
        }

    def save(self, kind: str) -> Path:
        path = self.out_dir / f"{kind}.pt"
        if not self.dist.is_main:
            return path
        state = self._checkpoint_state()
        if kind != "last" and not (kind == "best" and self.config.best_with_optimizer):  # weights (resuming: last.pt)
            state["optimizer"], state["scaler"] = None, None
        with self.cb.writing():
            save_checkpoint(path, state)
            self.cb.on_checkpoint(path, kind)
        return path

    def _restore(self, path: Path) -> None:
        ckpt = read_checkpoint(path, map_location=self.device)
        # as configs, not dicts: a checkpoint of an earlier version lacks the fields added since, whose
        # defaults are the model it trained
        if GPTConfig.from_dict(ckpt["model_config"]) != self.model_config:
            raise ValueError(f"{path} holds a different model ({ckpt['model_config']}); cannot resume")
        self.model.load_state_dict(ckpt["model"])
        load_optimizer_state(self.optimizer, ckpt["optimizer"])
        if self.scaler and ckpt.get("scaler"):
            self.scaler.load_state_dict(ckpt["scaler"])
        self.state = _State(**ckpt["train_state"])
        self.batch_gen.set_state(ckpt["rng"]["batch"])
        torch.set_rng_state(ckpt["rng"]["cpu"])
        if self.device.type == "cuda" and ckpt["rng"].get("cuda") is not None:
            torch.cuda.set_rng_state_all(ckpt["rng"]["cuda"])
        log.info("resumed from %s at step %d", path, self.state.step)

    # -- the loop ---------------------------------------------------------------------
    def run(self) -> TrainResult:
        cfg = self.config
        info = self.info()
        self.cb.on_start(info)
        dev.reset_peak_memory(self.device)
        self.model.train()
        final: StepMetrics | None = None
        if self.state.step == 0 and self.dist.is_main:
            final = self._evaluate_and_log(tokens_per_sec=0.0)
            self._maybe_sample()
        stopped = False
        tokens_per_step = cfg.batch_size * self.model_config.context * cfg.grad_accum
        steps_in_interval = 0
        loss_sum = torch.zeros((), device=self.device)
        dev.synchronize(self.device)
        interval_start = time.perf_counter()
        for step in range(self.state.step, cfg.steps):
            # rank 0 decides early stopping (it evaluates): every rank learns it here, with the stop requests
            if distributed.any_rank(self.cb.should_stop() or self._patience_spent(), self.dist, self.device):
                stopped = not self._patience_spent()
                break
            loss_sum += self._guarded_step(step)
            self.cb.on_progress(step + 1)
            steps_in_interval += 1
            self.state.step = step + 1
            self.state.tokens_seen += tokens_per_step
            is_eval = self.state.step % cfg.eval_every == 0 or self.state.step == cfg.steps
            if not (is_eval or self.state.step % cfg.log_interval() == 0):
                continue
            self._flush_guard()
            loss_sum = distributed.mean_over_ranks(loss_sum, self.dist)  # the global batch's loss
            if not self.dist.is_main:  # rank 0 evaluates, logs and samples; the others go on
                steps_in_interval = 0
                loss_sum.zero_()
                continue
            # Timed region: the training steps since the last log; evaluation and sampling excluded.
            dev.synchronize(self.device)
            interval_time = time.perf_counter() - interval_start
            self.state.elapsed_sec += interval_time
            tps = steps_in_interval * tokens_per_step / interval_time if interval_time > 0 else 0.0
            batch_loss = float(loss_sum) / steps_in_interval
            if not math.isfinite(batch_loss):  # a distributed run's: each rank checked only gradients
                raise NonFiniteLoss("loss", batch_loss, self._non_finite_story("loss", batch_loss, self.state.step))
            steps_in_interval = 0
            loss_sum.zero_()
            if is_eval:
                final = self._evaluate_and_log(tokens_per_sec=tps)
            else:
                final = self._log(batch_loss, None, tps)
            self._maybe_sample()
            dev.synchronize(self.device)
            interval_start = time.perf_counter()
        self._flush_guard()
        stop_reason = self._early_stop_reason()
        if stopped:
            if steps_in_interval:
                self.state.elapsed_sec += time.perf_counter() - interval_start
            self.save("last")
        distributed.wait_for_all(self.dist)
        return TrainResult(
            steps_done=self.state.step,
            stopped=stopped,
            best_val_loss=self.state.best_val_loss,
            best_step=self.state.best_step,
            final=final,
            device=str(self.device),
            precision=self.precision,
            out_dir=self.out_dir,
            info=info,
            stop_reason=stop_reason,
        )

    def _guarded_step(self, step: int) -> torch.Tensor:
        """``_train_step``, stopping the run at a NaN or infinite loss or gradient norm (before the
        optimizer touches the weights), or at a run of steps fp16's gradient scaler had to skip."""
        scale = self.scaler.get_scale() if self.scaler else None
        try:
            loss = self._train_step(step)
        except NonFiniteLoss as exc:
            raise self._with_story(exc, step + 1) from None
        if self.scaler is not None:
            skipped = self.scaler.get_scale() < scale  # the scaler halves its scale when it skips a step
            self.skipped_in_a_row = self.skipped_in_a_row + 1 if skipped else 0
            if self.skipped_in_a_row >= MAX_SKIPPED_STEPS:
                story = self._non_finite_story("gradient norm", math.inf, step + 1)
                raise NonFiniteLoss("gradient norm", math.inf, f"{story} ({MAX_SKIPPED_STEPS} fp16 steps in a row "
                                    "skipped by the gradient scaler)")
            if skipped:
                return loss  # finite (checked), but the weights did not move
        self.recent_losses.append((step + 1, loss))
        return loss

    def _with_story(self, exc: NonFiniteLoss, step: int) -> NonFiniteLoss:
        """The error again with the whole story, at its own step when it knows it (the deferred guard's)."""
        at = exc.step or step
        return NonFiniteLoss(exc.what, exc.value, self._non_finite_story(exc.what, exc.value, at), step=at)

    def _flush_guard(self) -> None:
        """The deferred guard's last verdict, before anything reads the loss or the weights."""
        if self.guard is not None:
            try:
                self.guard.flush()
            except NonFiniteLoss as exc:
                raise self._with_story(exc, self.state.step) from None

    def _non_finite_story(self, what: str, value: float, step: int) -> str:
        """e.g. "loss became NaN at step 312 (last finite train loss 3.92 at step 311); best checkpoint
        kept (step 250, val 3.81)"."""
        shown = "NaN" if math.isnan(value) else "infinite" if math.isinf(value) else f"{value:g}"
        story = f"{what} became {shown} at step {step}"
        last = next(((s, loss) for s, loss in reversed(self.recent_losses) if s < step), None)
        if last is not None:
            story += f" (last finite train loss {float(last[1]):.2f} at step {last[0]})"
        if self.state.best_step:
            story += f"; best checkpoint kept (step {self.state.best_step}, val {self.state.best_val_loss:.2f})"
        elif self.state.step >= self.config.eval_every:
            story += "; no checkpoint: the validation loss never fell below its value at step 0"
        else:
            story += "; no checkpoint yet (before the first evaluation)"
        return story

    def _patience_spent(self) -> bool:
        patience = self.config.early_stop_patience
        return bool(patience) and self.state.evals_without_improvement >= patience

    def _early_stop_reason(self) -> str | None:
        if not self._patience_spent() or self.state.step >= self.config.steps:
            return None
        delta = self.config.early_stop_min_delta
        return (f"stopped early at step {self.state.step}: validation loss has not improved"
                f"{f' by {delta:g}' if delta else ''} for {self.state.evals_without_improvement} evaluations; "
                f"best step {self.state.best_step} (val {self.state.best_val_loss:.2f})")

    def _train_step(self, step: int) -> torch.Tensor:
        """One optimizer update (over ``grad_accum`` micro-batches); returns the mean loss, detached."""
        cfg = self.config
        set_lr(self.optimizer, step, cfg)
        dropout_on = cfg.dropout_on(step)  # late dropout: none until dropout_start of the steps
        if dropout_on != self.dropout_on:
            self.dropout_on = dropout_on
            self.model.set_dropout(dropout_on)
        batches = (  # every rank draws the same global batch and trains on its own rows
            tuple(distributed.shard(t, self.dist) for t in get_batch(
                self.splits.train, cfg.batch_size, self.model_config.context, self.batch_gen, self.device))
            for _ in range(cfg.grad_accum)
        )
        return train_step(self.forward_model, self.optimizer, batches, device=self.device, precision=self.precision,
                          config=cfg, scaler=self.scaler, guard=self.guard, step=step + 1)

    def _val_loss_full(self, estimate: float) -> float | None:
        """The whole split's loss when the estimate comes within TARGET_MARGIN of a target not yet reached."""
        if self.target is None or self.state.target_step is not None or estimate > self.target + TARGET_MARGIN:
            return None
        loss = full_val_loss(self.eval_model, self.splits.val, self.model_config.context, self.config.batch_size,
                             self.device, self.precision)
        if loss <= self.target:
            self.state.target_step = self.state.step
        return loss

    def _log(self, train_loss: float, val_loss: float | None, tokens_per_sec: float,
             val_loss_full: float | None = None) -> StepMetrics:
        m = StepMetrics(
            step=self.state.step,
            train_loss=train_loss,
            val_loss=val_loss,
            lr=lr_at(max(0, self.state.step - 1), self.config),
            tokens_per_sec=tokens_per_sec,
            elapsed_sec=self.state.elapsed_sec,
            tokens_seen=self.state.tokens_seen,
            epochs=self.state.tokens_seen / len(self.splits.train),
            peak_mem_mib=dev.peak_memory_mib(self.device),
            val_loss_full=val_loss_full,
        )
        if self.csv is not None:
            self.csv.append(m)
        self.cb.on_step(m)
        return m

    def _evaluate_and_log(self, tokens_per_sec: float) -> StepMetrics:
        losses = estimate_loss(
            self.eval_model, self.splits, self.config, self.model_config.context, self.device, self.precision
        )
        if not (math.isfinite(losses["val"]) and math.isfinite(losses["train"])):
            what, value = ("validation loss", losses["val"]) if not math.isfinite(losses["val"]) else \
                ("evaluation's train loss", losses["train"])
            raise NonFiniteLoss(what, value, self._non_finite_story(what, value, self.state.step))
        m = self._log(losses["train"], losses["val"], tokens_per_sec, self._val_loss_full(losses["val"]))
        self.cb.on_eval(m)
        if self.config.head_scores:
            self._record_head_scores(m.step)
        best = self.state.best_val_loss
        if best is None or losses["val"] < best - self.config.early_stop_min_delta:
            self.state.evals_without_improvement = 0
        elif self.state.step > 0:
            self.state.evals_without_improvement += 1
        improved = self.state.best_val_loss is None or losses["val"] < self.state.best_val_loss
        if improved:
            self.state.best_val_loss, self.state.best_step = losses["val"], self.state.step
        if self.state.step > 0:
            if improved:
                self.save("best")
            self.save("last")
            if self.config.keep_every and self.state.step % self.config.keep_every == 0:
                self.save(f"step-{self.state.step}")
        return m

    def _record_head_scores(self, step: int) -> None:
        """Each head's role scores on the fixed probe (one small forward pass of the uncompiled model, rank 0):
        to the callbacks and to ``head_scores.jsonl`` beside ``metrics.csv``."""
        scores = {name: values.tolist() for name, values in head_scores(self.model).items()}
        if self.csv is not None:
            append_head_scores(self.out_dir / HEAD_SCORES_FILE, step, scores)
        self.cb.on_head_scores(step, scores)

    def _sample_steps(self) -> set[int]:
        cfg = self.config
        steps = {0, cfg.steps // 2, cfg.steps}
        if cfg.sample_interval():
            steps |= set(range(0, cfg.steps + 1, cfg.sample_interval()))
        return steps

    def _maybe_sample(self) -> None:
        cfg = self.config
        if cfg.sample_tokens == 0 or self.state.step not in self._sample_steps():
            return
        with _eval_mode(self.model):
            text = sample_text(
                self.model,
                self.tokenizer,
                cfg.sample_prompt,
                cfg.sample_tokens,
                temperature=cfg.sample_temperature,
                seed=cfg.seed,
            )
        self.cb.on_sample(Sample(step=self.state.step, prompt=cfg.sample_prompt, text=text))


@contextlib.contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    was = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was)


def train(
    config: TrainConfig,
    out_dir: str | Path,
    *,
    callbacks: Callbacks | None = None,
    cache_dir: str | Path | None = None,
    resume: bool = False,
) -> TrainResult:
    """Build a :class:`Trainer` and run it to the end (or until ``should_stop``)."""
    return Trainer(config, out_dir, callbacks=callbacks, cache_dir=cache_dir, resume=resume).run()
