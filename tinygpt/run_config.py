"""The run options: :class:`TrainConfig`, every option declared once (default, range or choices, help,
group), and :data:`OPTIONS`, what the command line, the dashboard's form and API, sweeps and the checks of
every layer read back. No torch here: the dashboard validates runs without importing it.

>>> TrainConfig(preset="tiny", steps=20).validate().model_config().d_model
64
>>> TrainConfig(lr=2).validate()
Traceback (most recent call last):
...
ValueError: lr must be in (0, 1], got 2.0
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields, replace
from typing import get_args

from .config import SIZE_BOUNDS, GPTConfig, MlpKind, NormKind, PosKind
from .device_names import PRECISION_CHOICES, check_device_name
from .options import option, options_of, unknown_name_message
from .presets import ARCHS, PRESETS, model_config, training_memory
from .recipes import DEFAULT_RECIPE, RECIPES, with_recipe

#: The ``optimizer`` and ``lr_schedule`` options' choices (tinygpt/optimization.py implements them).
OPTIMIZER_CHOICES = ("adamw", "muon")
SCHEDULE_CHOICES = ("cosine", "wsd", "linear")
#: The most batches per split an evaluation takes unless ``eval_batches`` says otherwise (the series' 20).
EVAL_BATCHES_MAX = 20
#: ``torch.compile``'s modes (the ``compile_mode`` option; tinygpt/train.py's ``compile_model``).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")


def size_bounds(name: str) -> dict[str, int]:
    """A model size option's range: the model's own :data:`~tinygpt.config.SIZE_BOUNDS`."""
    low, high = SIZE_BOUNDS[name]
    return {"ge": low, "le": high}


@dataclass
class TrainConfig:
    """Everything that defines a training run, each option declared once (:mod:`tinygpt.options`):
    its default, range or choices, help and group. :data:`OPTIONS` reads them back for every layer."""

    recipe: str = option(DEFAULT_RECIPE, "a named set of run options that fills the ones not given (series: the "
                         "series' own; fast: holmes 3.76 sooner; fast-best: a better model within the series' tokens; "
                         "docs/SPEEDRUN.md)", "model", choices=tuple(RECIPES))
    # model
    preset: str = option("holmes", "model size and suggested schedule", "model", choices=tuple(PRESETS))
    arch: str | None = option(None, "architecture: positions, norm and MLP", "model",
                              choices=tuple(ARCHS), none="the preset's")
    vocab_size: int | None = option(None, "vocabulary (and tokenizer) size", "model", **size_bounds("vocab_size"),
                                    unit="tokens", none="the preset's", advanced=True)
    dropout: float | None = option(None, "dropout probability", "model", ge=0, lt=1, none="the preset's",
                                   advanced=True)
    attn_dropout: float | None = option(None, "dropout on the attention probabilities (0: on the residual branches "
                                        "only, a faster step on a CPU)", "model", ge=0, lt=1, none="dropout's",
                                        advanced=True)
    d_model: int | None = option(None, "width of the residual stream", "model", **size_bounds("d_model"), none="the preset's",
                                 advanced=True)
    n_layers: int | None = option(None, "transformer blocks", "model", **size_bounds("n_layers"), none="the preset's",
                                  advanced=True)
    n_heads: int | None = option(None, "attention heads (must divide d_model)", "model", **size_bounds("n_heads"),
                                 none="the preset's", advanced=True)
    context: int | None = option(None, "tokens the model sees at once", "model", **size_bounds("context"), unit="tokens",
                                 none="the preset's", advanced=True)
    pos: str | None = option(None, "positions", "model", choices=get_args(PosKind), none="the architecture's",
                             advanced=True)
    norm: str | None = option(None, "normalisation", "model", choices=get_args(NormKind),
                              none="the architecture's", advanced=True)
    mlp: str | None = option(None, "feed-forward block (relu2: ReLU squared)", "model", choices=get_args(MlpKind),
                             none="the architecture's", advanced=True)
    qk_norm: bool = option(False, "RMS-normalise queries and keys per head, before RoPE", "model", advanced=True)
    untied_head: bool = option(False, "an output head of its own (zero at the start), not the token embedding's",
                               "model", advanced=True)
    # data and device
    corpus: str = ""  # a file: the command line's --corpus, the dashboard's dataset
    device: str = option("auto", "auto, cpu, cuda, cuda:N, mps or xla", "data and device")
    precision: str = option("auto", "number format (auto: bf16 where it is faster, else fp32; fp16 on old GPUs)",
                            "data and device", choices=PRECISION_CHOICES)
    seed: int = option(1337, "initialisation and batches: the same on every device", "data and device", ge=0,
                       le=2**63 - 1)
    threads: int | None = option(None, "CPU threads", "data and device", ge=0, le=1024, none="PyTorch's default",
                                 advanced=True)
    compile: bool = option(False, "torch.compile the model", "data and device", advanced=True)
    compile_mode: str = option("default", "torch.compile's mode (compile on): reduce-overhead records CUDA graphs, "
                               "for small batches on a GPU whose step waits on kernel launches", "data and device",
                               choices=COMPILE_MODES, advanced=True, applies_with=("compile", True))
    compile_optimizer: bool = option(False, "compile the optimizer's step as well (compile on; learning rates held "
                                     "as tensors so the schedule recompiles nothing): with reduce-overhead it "
                                     "joins the step's CUDA graphs", "data and device", advanced=True,
                                     applies_with=("compile", True))
    grad_checkpointing: bool = option(False, "recompute activations in the backward pass (less memory)",
                                      "data and device", advanced=True)
    # optimisation
    batch_size: int = option(32, "sequences per step", "optimisation", ge=1, le=4096, unit="sequences")
    optimizer: str = option("adamw", "adamw, or muon for the blocks' matrices (AdamW for the rest)", "optimisation",
                            choices=OPTIMIZER_CHOICES)
    lr: float = option(1e-3, "peak learning rate (AdamW)", "optimisation", gt=0, le=1)
    muon_lr: float = option(0.02, "Muon's peak learning rate (optimizer muon)", "optimisation", gt=0, le=1,
                            advanced=True, applies_with=("optimizer", "muon"))
    muon_momentum: float = option(0.95, "Muon's momentum (optimizer muon)", "optimisation", ge=0, lt=1,
                                  advanced=True, applies_with=("optimizer", "muon"))
    muon_ns_steps: int = option(5, "Muon's Newton-Schulz iterations, which orthogonalise each update (optimizer muon)",
                                "optimisation", ge=1, le=20, advanced=True, applies_with=("optimizer", "muon"))
    muon_weight_decay: float = option(0.0, "Muon's decoupled weight decay on the blocks' matrices (optimizer muon; "
                                      "each step multiplies them by 1 - lr x decay)", "optimisation", ge=0, le=1,
                                      advanced=True, applies_with=("optimizer", "muon"))
    weight_decay: float = option(0.1, "AdamW weight decay on 2-D weights (Muon's matrices: muon_weight_decay)",
                                 "optimisation", ge=0, le=1, advanced=True)
    grad_clip: float = option(1.0, "gradient-norm clip", "optimisation", ge=0, le=1000, advanced=True)
    grad_accum: int = option(1, "micro-batches per step (gradient accumulation)", "optimisation", ge=1, le=1024,
                             advanced=True)
    label_smoothing: float = option(0.0, "label smoothing of the training loss", "optimisation", ge=0, lt=1,
                                    advanced=True)
    # schedule
    steps: int = option(1500, "optimizer steps", "schedule", ge=1, le=10_000_000, unit="steps")
    warmup: int | None = option(None, "linear warmup", "schedule", ge=0, le=10_000_000, unit="steps",
                                none="min(200, steps / 10)", advanced=True)
    lr_schedule: str = option("cosine", "after the warmup: cosine or linear to the floor, or wsd (stable, then a "
                              "linear decay over the last decay_fraction of the steps)", "schedule",
                              choices=SCHEDULE_CHOICES)
    decay_fraction: float = option(0.2, "wsd: the share of the steps that decays", "schedule", gt=0, le=1,
                                   advanced=True, applies_with=("lr_schedule", "wsd"))
    min_lr_ratio: float = option(0.1, "the schedule's floor at the last step, as a fraction of the peak",
                                 "schedule", ge=0, le=1, advanced=True)
    dropout_start: float = option(0.0, "late dropout: the share of the steps trained without dropout before "
                                  "dropout and attn_dropout start (0: from the first step)", "schedule", ge=0, lt=1,
                                  advanced=True)
    # evaluation and samples
    eval_every: int = option(250, "evaluate (and checkpoint) every", "evaluation and samples", ge=1,
                             le=10_000_000, unit="steps")
    eval_batches: int | None = option(None, "batches per split in an evaluation", "evaluation and samples", ge=1,
                                      le=1000, none=f"half the batches trained between evaluations, "
                                      f"1 to {EVAL_BATCHES_MAX}", advanced=True)
    target_val_loss: float | None = option(None, "the validation loss whose first reaching is timed (time to "
                                           "target; 0: none)", "evaluation and samples", ge=0, le=100,
                                           none="the corpus' known target (holmes: 3.76), else none")
    early_stop_patience: int = option(0, "stop after this many evaluations without an improvement of "
                                      "early_stop_min_delta in validation loss (0: never)", "evaluation and samples",
                                      ge=0, le=10_000, unit="evaluations", advanced=True)
    early_stop_min_delta: float = option(0.0, "the fall in validation loss that counts as an improvement",
                                         "evaluation and samples", ge=0, le=100, advanced=True)
    best_with_optimizer: bool = option(False, "keep the optimizer state in best.pt too, to continue training "
                                       "from it (triples its size)", "evaluation and samples", advanced=True)
    keep_every: int = option(0, "also keep the checkpoint of each evaluation at a multiple of this many steps "
                             "(step-N.pt: the Inside view looks at the model as it was then; 0: the best only)",
                             "evaluation and samples", ge=0, le=10_000_000, unit="steps", advanced=True)
    head_scores: bool = option(True, "record each head's role scores (previous token, induction, first token, "
                               "entropy) on a fixed probe at every evaluation: one small forward pass",
                               "evaluation and samples", advanced=True)
    log_every: int | None = option(None, "log the training loss every", "evaluation and samples", ge=1,
                                   le=10_000_000, unit="steps", none="min(10, eval_every)", advanced=True)
    sample_prompt: str = option("Holmes", "prompt of the samples taken while training", "evaluation and samples",
                                max_length=1000)
    sample_every: int | None = option(None, "sample every (0: only at the start, middle and end)",
                                      "evaluation and samples", ge=0, le=10_000_000, unit="steps",
                                      none="every evaluation", advanced=True)
    sample_tokens: int = option(40, "length of each sample", "evaluation and samples", ge=0, le=2000,
                                unit="tokens", advanced=True)
    sample_temperature: float = option(0.8, "temperature of the samples", "evaluation and samples", ge=0, le=10,
                                       advanced=True)

    def validate(self) -> TrainConfig:
        """Raise ValueError naming the first option out of range (the messages of :mod:`tinygpt.options`)."""
        for name, spec in OPTIONS.items():
            setattr(self, name, spec.check(getattr(self, name)))
        check_device_name(self.device)
        self.model_config()  # a preset and arch that make a model
        return self

    def model_config(self) -> GPTConfig:
        """The preset in its architecture, with the model options that are set overriding it (ValueError
        naming both fields for sizes that do not fit together)."""
        overrides = {name: getattr(self, name) for name in MODEL_OVERRIDES if getattr(self, name) is not None}
        return model_config(self.preset, self.arch, **overrides)

    def resolved(self) -> TrainConfig:
        """This run with nothing left to its preset, its architecture or a rule: every model size and switch,
        the warmup, the evaluation's batches and the logging and sampling intervals as this version resolves
        them. The dashboard stores a run's options resolved when it is submitted, so that a later version's
        presets or rules cannot change what the run means (resuming it included). The model and the schedule
        are the same either way; ``precision``, ``threads`` and ``device`` are the device's to resolve.

        >>> r = TrainConfig(preset="tiny", steps=100, eval_every=50).resolved()
        >>> (r.arch, r.d_model, r.n_layers, r.context, r.mlp, r.warmup, r.eval_batches, r.log_every, r.sample_every)
        ('modern', 64, 4, 128, 'swiglu', 10, 20, 10, 50)
        """
        model = self.model_config()
        shape = {name: getattr(model, name) for name in MODEL_OVERRIDES if name != "attn_dropout"}  # None: dropout's
        return replace(self, arch=self.arch or PRESETS[self.preset].default_arch, **shape, warmup=self.warmup_steps(),
                       eval_batches=self.eval_batch_count(), log_every=self.log_interval(),
                       sample_every=self.sample_interval())

    def warmup_steps(self) -> int:
        return self.warmup if self.warmup is not None else min(200, self.steps // 10)

    def dropout_on(self, step: int) -> bool:
        """Whether step ``step`` (0-based) trains with dropout: from ``dropout_start`` of the steps on.

        >>> [TrainConfig(steps=10, dropout_start=0.3).dropout_on(s) for s in (0, 2, 3, 9)]
        [False, False, True, True]
        """
        return step >= round(self.dropout_start * self.steps)

    def eval_batch_count(self) -> int:
        """Batches per split in each evaluation: ``eval_batches``, else as many over both splits together as
        were trained between two evaluations (at least 1 and at most :data:`EVAL_BATCHES_MAX` a split), so that
        a short run's evaluations, forward passes only, cost about a third of its training or less. The
        series' runs (250 steps between evaluations) take the 20.

        >>> [TrainConfig(steps=s).eval_batch_count() for s in (1, 4, 10, 1500)]
        [1, 2, 5, 20]
        >>> TrainConfig(steps=4, grad_accum=2).eval_batch_count(), TrainConfig(steps=4, eval_batches=7).eval_batch_count()
        (4, 7)
        """
        if self.eval_batches is not None:
            return self.eval_batches
        trained = min(self.eval_every, self.steps) * self.grad_accum  # batches between two evaluations
        return max(1, min(EVAL_BATCHES_MAX, trained // 2))

    def log_interval(self) -> int:
        return self.log_every or min(10, self.eval_every)

    def sample_interval(self) -> int:
        """0: samples only at step 0, mid-run and at the end."""
        return self.eval_every if self.sample_every is None else self.sample_every

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> TrainConfig:
        """A config from given or stored options (the command line's, a run's, config.json's): unknown keys are
        refused, missing ones take their recipe's values (:mod:`tinygpt.recipes`), then their defaults; values are
        checked."""
        data = with_recipe(data)
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(known))
        if unknown:  # e.g. "unknown training option 'learning_rate': did you mean 'lr'?"
            raise ValueError("; ".join(unknown_name_message(name, known, "training option") for name in unknown))
        return cls(**data).validate()

    def memory_estimate(self, processes: int = 1) -> int:
        """The least memory one of ``processes`` training processes needs, in bytes
        (:func:`tinygpt.presets.training_memory` of this run's model, batch, precision and checkpointing)."""
        return training_memory(self.model_config(), self.batch_size, precision=self.precision,
                               grad_checkpointing=self.grad_checkpointing, processes=processes)


def unused_options(given: Iterable[str], config: TrainConfig) -> list[str]:
    """A warning for each option given that takes no effect in ``config`` (declared ``applies_with`` another
    option's value that the run does not have).

    >>> unused_options(["muon_lr", "lr"], TrainConfig(muon_lr=0.01))
    ["muon_lr takes effect only with optimizer 'muon' (this run's: 'adamw')"]
    """
    options = config.to_dict()
    warnings = []
    for name in given:
        spec = OPTIONS.get(name)
        if spec is not None and not spec.applies(options):
            other, value = spec.applies_with
            warnings.append(f"{name} takes effect only with {other} {value!r} (this run's: {options[other]!r})")
    return warnings


#: The options that override the preset's model (``GPTConfig`` fields of the same name).
MODEL_OVERRIDES = ("vocab_size", "dropout", "attn_dropout", "d_model", "n_layers", "n_heads", "context", "pos",
                   "norm", "mlp", "qk_norm", "untied_head")

#: Every run option, in declaration order: name -> :class:`tinygpt.options.Option`.
OPTIONS = options_of(TrainConfig)


def stored_model_config(options: dict) -> GPTConfig:
    """The model of a run's stored options (a dashboard run's config, config.json's ``train``), whatever else
    they hold: the preset in its architecture with the model options set. ValueError for sizes that do not fit.

    >>> stored_model_config({"preset": "tiny", "d_model": 128, "dataset": "holmes"}).d_model
    128
    """
    overrides = {name: options[name] for name in MODEL_OVERRIDES if options.get(name) is not None}
    return model_config(options.get("preset") or TrainConfig.preset, options.get("arch"), **overrides)
