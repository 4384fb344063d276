"""The metric names other trainers log, mapped onto a run's own columns (``tinygpt.records.StepMetrics``): the
one statement of the mapping, for every way a foreign run comes in (TensorBoard files, speedrun logs, and the
dashboard's MLflow and W&B-style endpoints). A name not mapped is kept as a series of its own; none is dropped.

>>> column_for("val/loss"), column_for("Train Loss"), column_for("mfu")
('val_loss', 'train_loss', None)
>>> mapped_rows([("train/loss", 0, 4.5, 10.0), ("val/loss", 0, 4.75, 10.0), ("lr", 1, 1e-3, 12.5),
...              ("train/loss", 1, 4.25, 12.5)], tokens_per_step=1024)[1]
{'step': 1, 'train_loss': 4.25, 'val_loss': None, 'lr': 0.001, 'tokens_per_sec': None, 'elapsed_sec': 2.5, 'tokens_seen': 1024, 'epochs': None, 'peak_mem_mib': None, 'val_loss_full': None}
"""

from __future__ import annotations

from collections.abc import Iterable

from .records import METRIC_COLUMNS

#: Each column and the names that mean it (lowercase, as logged by nanoGPT, llm.c, modded-nanogpt, nanochat,
#: notebooks). The step itself is the metric's step; a metric named ``iter`` or ``step`` is that step again.
COLUMN_NAMES: dict[str, tuple[str, ...]] = {
    "train_loss": ("train_loss", "train/loss", "train loss", "loss", "trl", "train/lm_loss", "training_loss"),
    "val_loss": ("val_loss", "val/loss", "val loss", "tel", "eval/loss", "valid/loss", "validation/loss",
                 "eval_loss", "validation_loss"),
    "lr": ("lr", "learning_rate", "train/lr", "lr-adamw", "train/learning_rate"),
    "tokens_per_sec": ("tokens_per_sec", "tok_per_sec", "tokens/s", "tok/s", "train/tok_per_sec",
                       "train/tokens_per_sec", "throughput"),
    "tokens_seen": ("tokens_seen", "tokens", "train/tokens", "total_tokens"),
    "elapsed_sec": ("elapsed_sec", "train_time_sec", "train/time_sec"),
    "peak_mem_mib": ("peak_mem_mib", "memory_mib"),
}
#: Names that only say the step (the metric's own step already does): kept as their own series.
STEP_NAMES = ("iter", "step", "iteration", "global_step", "_step", "s")
#: Params that say how many steps a run plans (nanoGPT's max_iters, modded-nanogpt's num_iterations, ...).
STEP_COUNT_NAMES = ("max_iters", "num_iterations", "train_steps", "total_steps", "max_steps", "steps")
#: Unit changes: a name logged in another unit, and the factor to the column's unit.
SCALED_NAMES: dict[str, tuple[str, float]] = {"train_time": ("elapsed_sec", 1e-3)}  # modded-nanogpt: ms

#: What each column is called on a run page ("val/loss -> validation loss").
COLUMN_TITLES = {"train_loss": "training loss", "val_loss": "validation loss", "lr": "learning rate",
                 "tokens_per_sec": "tokens/s", "tokens_seen": "tokens seen", "elapsed_sec": "training time (s)",
                 "peak_mem_mib": "peak memory (MiB)"}

_COLUMN_OF = {name: column for column, names in COLUMN_NAMES.items() for name in names}
#: How the mapping reads in the README and ``tinygpt import --help``, one line per column.
MAPPING_LINES = [f"{', '.join(names)} -> {COLUMN_TITLES[column]}" for column, names in COLUMN_NAMES.items()]


def column_for(name: str) -> str | None:
    """The run column a logged metric name means (None: kept as its own series)."""
    key = name.strip().lower()
    if key in SCALED_NAMES:
        return SCALED_NAMES[key][0]
    return _COLUMN_OF.get(key)


def title_for(name: str) -> str | None:
    """What a logged name fills on a run page: its column's title, ``step`` for a name that only says the step
    (drawn as no chart of its own, still kept and exported); None: a series of its own.

    >>> title_for("val/loss"), title_for("iter"), title_for("mfu")
    ('validation loss', 'step', None)
    """
    column = column_for(name)
    if column is not None:
        return COLUMN_TITLES[column]
    return "step" if name.strip().lower() in STEP_NAMES else None


def mapped_value(name: str, value: float) -> float:
    """``value`` in its column's unit (train_time in ms -> seconds)."""
    scale = SCALED_NAMES.get(name.strip().lower())
    return value * scale[1] if scale else value


def mapping_of(names: Iterable[str]) -> dict[str, str]:
    """The names logged that map onto a column: name -> column (what the run page says it did)."""
    return {name: column for name in sorted(set(names)) if (column := column_for(name)) is not None}


def mapped_rows(points: Iterable[tuple[str, int, float, float | None]], *, tokens_per_step: int | None = None,
                start_time: float | None = None) -> list[dict]:
    """Rows of the run's columns (``StepMetrics`` fields, None where not logged) from (name, step, value, wall
    time in seconds or None) points: one row per step that has any mapped value, in step order. ``elapsed_sec``,
    when not logged, is the wall time since the first point; ``tokens_seen``, when not logged, is
    ``step * tokens_per_step`` where that is known. ``start_time``: when the run started (default: the first
    point's time)."""
    points = list(points)
    times = [t for _, _, _, t in points if t is not None]
    first_time = start_time if start_time is not None else min(times) if times else None
    rows: dict[int, dict] = {}
    for name, step, value, wall in points:
        column = column_for(name)
        if column is None:
            continue
        row = rows.setdefault(step, {c: None for c in METRIC_COLUMNS} | {"step": step})
        row[column] = mapped_value(name, value)
        if wall is not None and first_time is not None:
            row["_wall"] = max(row.get("_wall") or 0.0, wall - first_time)
    for row in rows.values():
        wall = row.pop("_wall", None)
        if row["elapsed_sec"] is None and wall is not None:
            row["elapsed_sec"] = round(wall, 6)
        if row["tokens_seen"] is None and tokens_per_step:
            row["tokens_seen"] = row["step"] * tokens_per_step
        if row["tokens_seen"] is not None:
            row["tokens_seen"] = int(row["tokens_seen"])
    return [rows[s] for s in sorted(rows)]


def tokens_per_step_of(params: dict) -> int | None:
    """Tokens a step trains on, from a script's params where they say (nanoGPT's batch_size x block_size x
    gradient_accumulation_steps; ``tokens_per_step`` or ``tokens_per_iter`` as such).

    >>> tokens_per_step_of({"batch_size": "12", "block_size": 1024, "gradient_accumulation_steps": 40})
    491520
    """
    def number(name: str) -> int | None:
        value = params.get(name)
        return int(value) if isinstance(value, int | str) and str(value).isdigit() else None

    for name in ("tokens_per_step", "tokens_per_iter", "total_batch_size"):
        if (value := number(name)) is not None:
            return value
    batch, context = number("batch_size"), number("block_size") or number("sequence_length")
    if batch is None or context is None:
        return None
    return batch * context * (number("gradient_accumulation_steps") or 1)


def steps_of(params: dict, *, names: tuple[str, ...] = STEP_COUNT_NAMES) -> int | None:
    """The steps a script plans, from the first of its params that counts them (None: none does).

    >>> steps_of({"max_iters": "5000"}), steps_of({"lr": 0.1})
    (5000, None)
    """
    for name in names:
        value = params.get(name)
        if isinstance(value, int | str) and not isinstance(value, bool) and str(value).isdigit():
            return int(value)
    return None


def row_step(values: dict[str, float], default: int) -> int:
    """The step of a row of values logged together (a ``wandb.log`` dict): a value named as a step (nanoGPT logs
    ``iter``) says it; otherwise ``default`` (W&B's own count of log calls, or the call's ``step=``).

    >>> row_step({"iter": 250.0, "train/loss": 4.1}, 5), row_step({"loss": 4.1}, 5)
    (250, 5)
    """
    for name, value in values.items():
        if name.strip().lower() in STEP_NAMES and float(value).is_integer() and value >= 0:
            return int(value)
    return default
