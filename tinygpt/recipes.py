"""Recipes: named sets of run options, for the ``recipe`` option (``tinygpt train --recipe fast``, the form's
"Recipe" choice, ``"recipe": "fast"`` in the API or a sweep's base). A recipe fills the options that are not
given; the ones given win. ``series`` is the tiny-GPT series' own recipe: the declaration's defaults
(tinygpt/run_config.py), unchanged. Each other recipe says where its values were found (docs/SPEEDRUN.md).

A recipe knows its device: where what is fastest differs on one kind of device (``fast`` on a CUDA GPU), its
:class:`Variant` for that kind replaces its options there; the run's ``device`` option says which (``auto``: what
it picks on the machine that resolves the options, as the run's own device choice does). :data:`TIMES_TO_TARGET`
holds what each recipe was measured to take to holmes 3.76 (BENCHMARKS.md), and :func:`closest_times` picks the
records nearest a device, for the form.

>>> with_recipe({"recipe": "fast", "lr": 0.005, "device": "cpu"})["lr"], with_recipe({"recipe": "fast", "device": "cpu"})["optimizer"]
(0.005, 'muon')
>>> with_recipe({"recipe": "fast", "device": "cuda"})["compile_mode"]
'reduce-overhead'
>>> with_recipe({"steps": 10})
{'steps': 10}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Variant:
    """What a recipe means on one kind of device, where the options fastest there differ from its own."""
    description: str
    options: dict = field(default_factory=dict)  # replace the recipe's options on that kind of device


@dataclass(frozen=True)
class Recipe:
    name: str
    description: str
    options: dict = field(default_factory=dict)  # run options (TrainConfig's fields) and their values
    variants: dict[str, Variant] = field(default_factory=dict)  # by device type (cuda, mps, xla)

    def on(self, kind: str) -> Variant:
        """The recipe on a device of type ``kind`` (cpu, cuda, mps, xla): its variant there, else itself.

        >>> RECIPES["fast"].on("cuda").options["compile"], RECIPES["fast"].on("mps").options["optimizer"]
        (True, 'muon')
        """
        return self.variants.get(kind) or Variant(self.description, self.options)


#: What the fast recipes share (docs/SPEEDRUN.md sections 1-10): the model, the optimizer and the schedule's shape.
FAST_BASE = {"preset": "holmes", "n_layers": 4, "optimizer": "muon", "lr": 0.002, "lr_schedule": "wsd",
             "decay_fraction": 0.4, "qk_norm": True, "dropout": 0.1, "attn_dropout": 0.0, "eval_batches": 20}

RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe("series", "the series' recipe: AdamW, cosine decay, dropout 0.1 on the holmes model (the defaults)"),
        Recipe(
            "fast",
            "holmes validation loss 3.76 in 0.28 of the series' time on a 2-core CPU in fp32, 0.32 in bf16 "
            "(docs/SPEEDRUN.md sections 18 and 20): 4 blocks instead "
            "of 6, Muon for the blocks' matrices, batch 16, a stable learning rate then a long linear decay to zero "
            "(wsd), normalised queries and keys, dropout on the residual branches only and from half the steps on, "
            "1,008 steps",
            {**FAST_BASE, "batch_size": 16, "steps": 1008, "min_lr_ratio": 0.0, "dropout_start": 0.5,
             "eval_every": 48},
            {"cuda": Variant(
                "on a CUDA GPU: the series' own options with CUDA graphs (compile, reduce-overhead), the fastest way "
                "to holmes 3.76 measured on a GPU (docs/SPEEDRUN.md sections 14 and 18): the CPU's fast recipe is "
                "launch-bound there and took 1.3-1.6x the series' eager time",
                {"compile": True, "compile_mode": "reduce-overhead"})},
        ),
        Recipe(
            "fast-best",
            "the best model within the series' 12.3M tokens (docs/SPEEDRUN.md sections 14 and 17): the fast "
            "recipe's model and optimizer at batch 32 for 1,000 steps (8.2M tokens) with Muon's weight decay and "
            "the decay down to zero, best validation loss 3.66-3.68 over 3 seeds on a CPU (the series' 3.711), in "
            "about half the series' time on a CPU",
            {**FAST_BASE, "batch_size": 32, "steps": 1000, "eval_every": 24, "muon_weight_decay": 0.15,
             "min_lr_ratio": 0.0},
        ),
    )
}

DEFAULT_RECIPE = "series"


@dataclass(frozen=True)
class TimeToTarget:
    """A recipe's measured time to holmes validation loss 3.76 on one kind of hardware (BENCHMARKS.md): the slowest
    seed's training time as the dashboard shows it (evaluation excluded, compilation included)."""
    recipe: str
    kind: str  # the device type: cpu, cuda
    model: str  # the device's name as this machine reports it (tinygpt.device.describe_device): "AMD EPYC"
    hardware: str  # what the form calls it: "a 2-core AMD EPYC with AVX512-BF16"
    bf16: bool  # whether the hardware computes bf16 (precision auto picks it there)
    precision: str  # what the runs trained in
    seconds: float
    seeds: int
    source: str  # where BENCHMARKS.md has it


#: The hardware the times were measured on: kind, model, what the form calls it, whether it computes bf16.
H200 = {"kind": "cuda", "model": "NVIDIA H200", "hardware": "an NVIDIA H200", "bf16": True}
EPYC_BF16 = {"kind": "cpu", "model": "AMD EPYC", "hardware": "a 2-core AMD EPYC with AVX512-BF16", "bf16": True}

#: Every recorded time to 3.76 (tests/test_recipes.py holds each to the benchmark's results files).
TIMES_TO_TARGET: tuple[TimeToTarget, ...] = (
    TimeToTarget("series", **H200, precision="bf16", seconds=18.3, seeds=1,
                 source="BENCHMARKS.md, GPU: time to holmes 3.76, eager (2026-12-04)"),
    TimeToTarget("fast", **H200, precision="bf16", seconds=8.0, seeds=2,
                 source="BENCHMARKS.md, GPU: time to holmes 3.76, CUDA graphs (2026-12-04; the series' options)"),
    TimeToTarget("fast", **EPYC_BF16, precision="bf16", seconds=684.4, seeds=3,
                 source="BENCHMARKS.md, Time to target, precision auto (2026-12-07, attention written out)"),
    TimeToTarget("fast", **EPYC_BF16, precision="fp32", seconds=1081.9, seeds=3,
                 source="BENCHMARKS.md, Time to target, precision fp32 (2026-12-07)"),
    TimeToTarget("series", **EPYC_BF16, precision="bf16", seconds=2158.0, seeds=1,
                 source="BENCHMARKS.md, Time to target, precision auto (2026-12-07; its recorded tokens at its step's rate)"),
    TimeToTarget("series", **EPYC_BF16, precision="fp32", seconds=3848.5, seeds=1,
                 source="BENCHMARKS.md, Time to target, precision fp32 (2026-12-07; its recorded tokens at its step's rate)"),
)


def closest_times(recipe: str, kind: str, model: str = "", bf16: bool = False) -> tuple[list[TimeToTarget], bool]:
    """The recorded times of ``recipe`` on the hardware closest to a ``kind`` device named ``model`` that does (or
    does not) compute bf16: the same kind, then the same model, then the same bf16 ability; and whether that
    hardware is the device's own model. ([], False) where none is recorded on that kind.

    >>> times, same = closest_times("fast", "cuda", "NVIDIA H100 80GB HBM3", bf16=True)
    >>> times[0].hardware, same
    ('an NVIDIA H200', False)
    """
    on_kind = [t for t in TIMES_TO_TARGET if t.recipe == recipe and t.kind == kind]
    if not on_kind:
        return [], False
    rank = {t.hardware: (t.model in model, t.bf16 == bf16) for t in on_kind}
    nearest = max(rank, key=lambda hardware: rank[hardware])
    return [t for t in on_kind if t.hardware == nearest], rank[nearest][0]


def duration(seconds: float) -> str:
    """A training time as the form says it.

    >>> duration(7.6), duration(905.0)
    ('8 s', '15.1 min')
    """
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def guide(recipe: str, kind: str, model: str = "", bf16: bool = False) -> str:
    """What ``recipe`` is for on a ``kind`` device, and its measured time to 3.76 on the closest recorded
    hardware (the new-run form shows it beside the recipe).

    >>> guide("fast", "mps")[:30]
    'Holmes validation loss 3.76 in'
    >>> guide("fast", "cuda", "NVIDIA H200", True).split(". ")[-1]
    'Measured to holmes 3.76: 8 s at bf16 (the slowest of 2 seeds) on an NVIDIA H200.'
    """
    about = RECIPES[recipe].on(kind).description
    about = about[0].upper() + about[1:]
    times, same = closest_times(recipe, kind, model, bf16)
    if not times:
        return f"{about}. No time to holmes 3.76 recorded on a {kind} device yet."
    measured = ", ".join(f"{duration(t.seconds)} at {t.precision} (the slowest of {t.seeds} seed"
                         f"{'s' if t.seeds != 1 else ''})" for t in times)
    where = times[0].hardware + ("" if same else ", the closest hardware recorded")
    return f"{about}. Measured to holmes 3.76: {measured} on {where}."


def device_kind(device: object) -> str:
    """The type of the device a run's ``device`` option names: ``cuda:1`` -> cuda; ``auto``: what it resolves to on
    this machine (:func:`tinygpt.device.resolve_device`).

    >>> device_kind("cuda:1"), device_kind("cpu")
    ('cuda', 'cpu')
    """
    name = str(device)
    if name == "auto":
        from .device import resolve_device  # torch's probes, only for auto

        return resolve_device("auto").type
    return name.split(":")[0]


def with_recipe(options: Mapping[str, object]) -> dict:
    """``options`` over their recipe's values on their device (``options["recipe"]``, else the series'): the ones
    given win. An unknown recipe adds nothing here; the ``recipe`` option's own check names it. Runs on several
    devices at once (the API's ``"device": ["cpu", "cuda"]``) take the recipe's own options on every one.

    >>> with_recipe({"recipe": "fast", "device": ["cpu", "cuda"]})["optimizer"]
    'muon'
    """
    recipe = RECIPES.get(str(options.get("recipe", DEFAULT_RECIPE)))
    if recipe is None or not (recipe.options or recipe.variants):
        return dict(options)
    device = options.get("device", "auto")
    if isinstance(device, list | tuple):  # one submission on several devices compares them: the same options
        return {**recipe.options, **options}
    return {**recipe.on(device_kind(device)).options, **options}


def list_recipes() -> list[dict]:
    """Every recipe as data (``GET /api/recipes``, ``tinygpt info``): name, description, options, what it means on
    the devices where it differs, and its recorded times to holmes 3.76.

    >>> [r["name"] for r in list_recipes()], list(list_recipes()[1]["on_device"])
    (['series', 'fast', 'fast-best'], ['cuda'])
    """
    return [{"name": r.name, "description": r.description, "options": dict(r.options),
             "on_device": {kind: {"description": v.description, "options": dict(v.options)}
                           for kind, v in r.variants.items()},
             "times_to_target": [{"device": t.kind, "hardware": t.hardware, "precision": t.precision,
                                  "seconds": t.seconds, "seeds": t.seeds, "source": t.source}
                                 for t in TIMES_TO_TARGET if t.recipe == r.name]}
            for r in RECIPES.values()]
