"""Recipes: named sets of run options, for the ``recipe`` option (``tinygpt train --recipe fast``, the form's
"Recipe" choice, ``"recipe": "fast"`` in the API or a sweep's base). A recipe fills the options that are not
given; the ones given win. ``series`` is the tiny-GPT series' own recipe: the declaration's defaults
(tinygpt/run_config.py), unchanged. Each other recipe says where its values were found (docs/SPEEDRUN.md).

>>> with_recipe({"recipe": "fast", "lr": 0.005})["lr"], with_recipe({"recipe": "fast"})["optimizer"]
(0.005, 'muon')
>>> with_recipe({"steps": 10})
{'steps': 10}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Recipe:
    name: str
    description: str
    options: dict = field(default_factory=dict)  # run options (TrainConfig's fields) and their values


#: What the fast recipes share (docs/SPEEDRUN.md sections 1-10): the model, the optimizer and the schedule's shape.
FAST_BASE = {"preset": "holmes", "n_layers": 4, "optimizer": "muon", "lr": 0.002, "lr_schedule": "wsd",
             "decay_fraction": 0.4, "qk_norm": True, "dropout": 0.1, "attn_dropout": 0.0, "eval_batches": 20}

RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe("series", "the series' recipe: AdamW, cosine decay, dropout 0.1 on the holmes model (the defaults)"),
        Recipe(
            "fast",
            "holmes validation loss 3.76 in about 0.31 of the series' time (docs/SPEEDRUN.md): 4 blocks instead "
            "of 6, Muon for the blocks' matrices, batch 16, a stable learning rate then a long linear decay to zero "
            "(wsd), normalised queries and keys, dropout on the residual branches only and from half the steps on, "
            "1,008 steps",
            {**FAST_BASE, "batch_size": 16, "steps": 1008, "min_lr_ratio": 0.0, "dropout_start": 0.5,
             "eval_every": 48},
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


def with_recipe(options: Mapping[str, object]) -> dict:
    """``options`` over their recipe's values (``options["recipe"]``, else the series'): the ones given win. An
    unknown recipe adds nothing here; the ``recipe`` option's own check names it."""
    recipe = RECIPES.get(str(options.get("recipe", DEFAULT_RECIPE)))
    return {**recipe.options, **options} if recipe is not None else dict(options)


def list_recipes() -> list[dict]:
    """Every recipe as data (``GET /api/recipes``, the new-run form): name, description, options.

    >>> [r["name"] for r in list_recipes()]
    ['series', 'fast', 'fast-best']
    """
    return [{"name": r.name, "description": r.description, "options": dict(r.options)} for r in RECIPES.values()]
