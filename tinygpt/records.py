"""What a run records: its metric rows (``metrics.csv``), its samples, the overfitting verdict over its
evaluations, and :class:`Callbacks`, through which a caller of the training loop receives them (the CLI prints
them, the dashboard's job stores them, the reporter sends them). No torch here: the dashboard stores and judges
these without importing it.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path


@dataclass
class StepMetrics:
    """One row of ``metrics.csv``. This trainer fills every field but the validation losses (at evaluations
    only); a run of another trainer (``tinygpt.metric_names``) leaves None where its logs say nothing."""

    step: int
    train_loss: float | None
    val_loss: float | None
    lr: float | None
    tokens_per_sec: float | None
    elapsed_sec: float | None
    tokens_seen: int | None
    epochs: float | None
    peak_mem_mib: float | None
    # the loss over the whole validation split (every token once), measured at an evaluation whose estimate
    # comes near the run's target (tinygpt.train.TARGET_MARGIN): what decides that the target was reached
    val_loss_full: float | None = None


METRIC_COLUMNS = [f.name for f in fields(StepMetrics)]


@dataclass
class Sample:
    step: int
    prompt: str
    text: str


#: The heads' role scores a run records at each evaluation (``tinygpt.inside.head_scores``), in this order.
HEAD_SCORES = ("previous_token", "induction", "first_token", "entropy")
HEAD_SCORE_PREFIX = "heads/"
#: A head's induction score from which it counts as an induction head (attention spread evenly: about 0.01).
INDUCTION_FORMED = 0.5


def head_score_name(score: str, layer: int, head: int) -> str:
    """The series a head's score is recorded under.

    >>> head_score_name("induction", 1, 3), parse_head_score_name("heads/induction/L1H3")
    ('heads/induction/L1H3', ('induction', 1, 3))
    >>> parse_head_score_name("val/loss") is None
    True
    """
    return f"{HEAD_SCORE_PREFIX}{score}/L{layer}H{head}"


def parse_head_score_name(name: str) -> tuple[str, int, int] | None:
    """(score, layer, head) of a head-score series name; None for any other name."""
    if not name.startswith(HEAD_SCORE_PREFIX):
        return None
    score, _, where = name[len(HEAD_SCORE_PREFIX):].partition("/")
    layer, _, head = where.removeprefix("L").partition("H")
    if score not in HEAD_SCORES or not (layer.isdigit() and head.isdigit()):
        return None
    return score, int(layer), int(head)


def head_score_points(step: int, scores: dict[str, list[list[float]]]) -> list[dict]:
    """One evaluation's scores ({score: layers x heads}) as series points (``name``, ``step``, ``value``)."""
    return [{"name": head_score_name(score, layer, head), "step": step, "value": float(value)}
            for score, rows in scores.items() for layer, row in enumerate(rows) for head, value in enumerate(row)]


HEAD_SCORES_FILE = "head_scores.jsonl"  # a run folder's: one line per evaluation, {"step", "scores"}


def append_head_scores(path: Path, step: int, scores: dict[str, list[list[float]]]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"step": step, "scores": scores}) + "\n")


def read_head_scores(path: Path) -> dict[int, dict[str, list[list[float]]]]:
    """A run folder's recorded scores by step (a step recorded again, after a resume, keeps its last line).

    >>> import tempfile; path = Path(tempfile.mkdtemp()) / HEAD_SCORES_FILE
    >>> append_head_scores(path, 0, {"induction": [[0.1, 0.2]]}); append_head_scores(path, 0, {"induction": [[0.3, 0.2]]})
    >>> read_head_scores(path)
    {0: {'induction': [[0.3, 0.2]]}}
    """
    if not path.exists():
        return {}
    lines = (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return {line["step"]: line["scores"] for line in lines}


class Callbacks:
    """Override what you need; every method is a no-op by default."""

    def on_start(self, info: dict) -> None:
        """Once, with the resolved device, precision, parameter count and start step."""

    def on_step(self, metrics: StepMetrics) -> None:
        """Every logged step (every ``log_every`` steps and at evaluations)."""

    def on_eval(self, metrics: StepMetrics) -> None:
        """At each evaluation, after ``on_step`` for the same row."""

    def on_head_scores(self, step: int, scores: dict[str, list[list[float]]]) -> None:
        """At each evaluation (option ``head_scores``): each head's role scores, {score: layers x heads}."""

    def on_sample(self, sample: Sample) -> None:
        """Each sample taken during training."""

    def on_checkpoint(self, path: Path, kind: str) -> None:
        """After ``best.pt`` (kind ``best``), ``last.pt`` (kind ``last``) or a kept ``step-N.pt`` (kind
        ``step-N``, option ``keep_every``) is written."""

    def on_progress(self, step: int) -> None:
        """After every optimizer step (keep it cheap: no I/O); ``step`` steps are done."""

    def should_stop(self) -> bool:
        """Polled before each step; True stops the run after saving ``last.pt``."""
        return False

    def writing(self) -> contextlib.AbstractContextManager[None]:
        """Around each checkpoint's write and its ``on_checkpoint``: a section that nothing may break into
        half-way (the dashboard's job holds a cancel there until the file is whole and recorded)."""
        return contextlib.nullcontext()


class CallbackList(Callbacks):
    """Several callbacks as one (the CLI's progress bar and its reporter): each is called in turn."""

    def __init__(self, *callbacks: Callbacks) -> None:
        self.callbacks = callbacks

    def on_start(self, info: dict) -> None:
        for c in self.callbacks:
            c.on_start(info)

    def on_step(self, metrics: StepMetrics) -> None:
        for c in self.callbacks:
            c.on_step(metrics)

    def on_eval(self, metrics: StepMetrics) -> None:
        for c in self.callbacks:
            c.on_eval(metrics)

    def on_head_scores(self, step: int, scores: dict[str, list[list[float]]]) -> None:
        for c in self.callbacks:
            c.on_head_scores(step, scores)

    def on_sample(self, sample: Sample) -> None:
        for c in self.callbacks:
            c.on_sample(sample)

    def on_checkpoint(self, path: Path, kind: str) -> None:
        for c in self.callbacks:
            c.on_checkpoint(path, kind)

    def on_progress(self, step: int) -> None:
        for c in self.callbacks:
            c.on_progress(step)

    def should_stop(self) -> bool:
        return any(c.should_stop() for c in self.callbacks)

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for c in self.callbacks:
                stack.enter_context(c.writing())
            yield


@dataclass
class OverfitWatch:
    """Overfitting, the one rule (the dashboard's banner, its alert, its event): the validation loss above its
    best at ``evals`` evaluations in a row. ``update`` says True once, when that first happens.

    >>> watch = OverfitWatch.over([(0, 5.0), (250, 4.0), (500, 4.1), (750, 4.2)])
    >>> watch.verdict()
    {'best_step': 250, 'best_val_loss': 4.0, 'since': 500}
    >>> watch.message()
    'overfitting since step 500: validation loss above its best (4.0000 at step 250) for 2 evaluations; the best checkpoint is kept'
    """

    evals: int = 2
    best: float | None = None
    best_step: int | None = None
    above: int = 0
    since: int | None = None  # the first evaluation above the best

    @classmethod
    def over(cls, evaluations: Iterable[tuple[int, float]]) -> OverfitWatch:
        """The watch after these (step, validation loss) evaluations, in step order."""
        watch = cls()
        for step, val_loss in evaluations:
            watch.update(step, val_loss)
        return watch

    def update(self, step: int, val_loss: float) -> bool:
        if self.best is None or val_loss <= self.best:
            self.best, self.best_step, self.above, self.since = val_loss, step, 0, None
            return False
        self.above += 1
        self.since = self.since or step
        return self.above == self.evals

    @property
    def overfitting(self) -> bool:
        return self.above >= self.evals

    def verdict(self) -> dict:
        """What the run page draws: the best evaluation, and since when it overfits (None: it does not)."""
        return {"best_step": self.best_step, "best_val_loss": self.best,
                "since": self.since if self.overfitting else None}

    def message(self) -> str:
        """The overfitting alert's words."""
        return (f"overfitting since step {self.since}: validation loss above its best ({self.best:.4f} at step "
                f"{self.best_step}) for {self.evals} evaluations; the best checkpoint is kept")


@dataclass
class TargetReached:
    """When a run's validation loss first reached its target (time to target), the one rule for every layer:
    the first evaluation whose whole-split loss (``val_loss_full``) is at most the target; for rows that never
    measured it (files from older versions, other trainers) the first whose estimate (``val_loss``) is, marked
    ``exact=False``.

    >>> rows = [StepMetrics(0, 8.3, 8.3, 0, 0, 0, 0, 0, 0), StepMetrics(250, 4, 3.79, 0, 0, 300.0, 2048000, 0, 0, 3.80),
    ...         StepMetrics(500, 3.8, 3.74, 0, 0, 600.0, 4096000, 0, 0, 3.75)]
    >>> TargetReached.first(rows, 3.76)
    TargetReached(target=3.76, step=500, tokens_seen=4096000, elapsed_sec=600.0, val_loss=3.75, exact=True)
    """

    target: float
    step: int
    tokens_seen: int | None  # None: not known (another trainer's logs)
    elapsed_sec: float | None  # training seconds (evaluations and samples excluded), as the rows count them
    val_loss: float
    exact: bool = True

    @classmethod
    def first(cls, rows: Iterable[StepMetrics], target: float | None) -> TargetReached | None:
        if not target:
            return None
        rows = [r for r in rows if r.val_loss is not None]
        exact = any(r.val_loss_full is not None for r in rows)
        for r in rows:
            loss = r.val_loss_full if exact else r.val_loss
            if loss is not None and loss <= target:
                return cls(target, r.step, r.tokens_seen, r.elapsed_sec, loss, exact)
        return None

    def line(self) -> str:
        return reached_line(self.target, self.step, self.tokens_seen, self.elapsed_sec, exact=self.exact)


def reached_line(target: float, step: int, tokens_seen: int | None, elapsed_sec: float | None, *,
                 exact: bool = True) -> str:
    """What reaching a target is called everywhere (the tokens and time where they are known).

    >>> reached_line(3.76, 1120, 9_175_040, 6660), reached_line(3.76, 40, None, None)
    ('reached 3.76 at step 1,120, 9.2M tokens, 1 h 51 min', 'reached 3.76 at step 40')
    """
    tokens = "" if tokens_seen is None else f", {tokens_seen / 1e6:.1f}M tokens"
    time = "" if elapsed_sec is None else f", {duration_text(elapsed_sec)}"
    return f"reached {target:g} at step {step:,}{tokens}{time}{'' if exact else ' (by the estimate, not the whole split)'}"


def unreached_line(target: float, *, finished: bool) -> str:
    """A target not reached (yet).

    >>> unreached_line(3.76, finished=False)
    'target 3.76: not reached yet'
    """
    return f"target {target:g}: not reached{'' if finished else ' yet'}"


def duration_text(seconds: float) -> str:
    """A duration for people: "42 s", "3 min 5 s", "1 h 51 min".

    >>> [duration_text(s) for s in (42.4, 185, 6660)]
    ['42 s', '3 min 5 s', '1 h 51 min']
    """
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


class MetricsCsv:
    """``metrics.csv`` in the run folder; on resume, rows after the resume step are dropped."""

    def __init__(self, path: Path, resume_step: int | None) -> None:
        self.path = path
        rows: list[dict] = []
        if resume_step is not None and path.exists():
            with open(path, newline="") as f:
                rows = [r for r in csv.DictReader(f) if int(r["step"]) <= resume_step]
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=METRIC_COLUMNS)
            writer.writeheader()
            writer.writerows(rows)

    def append(self, m: StepMetrics) -> None:
        with open(self.path, "a", newline="") as f:
            row = asdict(m)
            row["val_loss"] = "" if m.val_loss is None else m.val_loss
            row["val_loss_full"] = "" if m.val_loss_full is None else m.val_loss_full
            csv.DictWriter(f, fieldnames=METRIC_COLUMNS).writerow(row)


def read_metrics_csv(path: str | Path) -> list[StepMetrics]:
    with open(path, newline="") as f:
        return [
            StepMetrics(
                step=int(r["step"]),
                train_loss=float(r["train_loss"]),
                val_loss=float(r["val_loss"]) if r["val_loss"] else None,
                lr=float(r["lr"]),
                tokens_per_sec=float(r["tokens_per_sec"]),
                elapsed_sec=float(r["elapsed_sec"]),
                tokens_seen=int(r["tokens_seen"]),
                epochs=float(r["epochs"]),
                peak_mem_mib=float(r["peak_mem_mib"]),
                val_loss_full=float(r["val_loss_full"]) if r.get("val_loss_full") else None,  # older files: none
            )
            for r in csv.DictReader(f)
        ]


def bits_per_byte(loss: float | None, bytes_per_token: float | None) -> float | None:
    """A loss in nats per token as bits per byte of text (None where either is unknown).

    >>> round(bits_per_byte(3.76, 3.2), 4)
    1.6952
    """
    if loss is None or not bytes_per_token:
        return None
    return loss / math.log(2) / bytes_per_token
