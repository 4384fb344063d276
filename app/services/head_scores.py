"""The heads' role scores a run records at each evaluation (``tinygpt.records.HEAD_SCORES``: previous token,
induction, first token, entropy, per layer x head on a fixed probe), kept as series of the run
(``heads/<score>/L<layer>H<head>``, ``metric_series``) like any other logged value, and read back as one table
per evaluation for the Inside view's chart, compare and the API. What the numbers mean: docs/inside.md."""

from __future__ import annotations

from sqlmodel import Session, col, select

from tinygpt.records import (
    HEAD_SCORE_PREFIX,
    HEAD_SCORES,
    INDUCTION_FORMED,
    head_score_points,
    parse_head_score_name,
)

from ..models import Metric, SeriesPoint
from .series_points import record_points


def record_head_scores(session: Session, *, run_id: int, step: int, scores: dict[str, list[list[float]]]) -> None:
    """One evaluation's scores ({score: layers x heads}); a step recorded again (a resumed run) replaces them."""
    unknown = set(scores) - set(HEAD_SCORES)
    if unknown:
        raise ValueError(f"unknown head scores {sorted(unknown)}; known: {', '.join(HEAD_SCORES)}")
    record_points(session, run_id=run_id, points=[{**p, "wall_time": None} for p in head_score_points(step, scores)])


def scores_over_training(session: Session, *, run_id: int, score: str | None = None) -> dict:
    """Every recorded evaluation's scores (or only ``score``'s): ``steps``, ``layers``, ``heads``, ``scores``
    {score: [step][layer][head]}, and the validation loss at each of those steps (None where the row has none)
    to draw them against."""
    prefix = HEAD_SCORE_PREFIX + (f"{score}/" if score else "")
    points = session.exec(select(SeriesPoint.name, SeriesPoint.step, SeriesPoint.value)
                          .where(SeriesPoint.run_id == run_id, col(SeriesPoint.name).startswith(prefix))).all()
    parsed = [(where, step, value) for name, step, value in points if (where := parse_head_score_name(name))]
    if not parsed:
        return {"steps": [], "layers": 0, "heads": 0, "scores": {}, "val_loss": []}
    steps = sorted({step for _, step, _ in parsed})
    layers = 1 + max(layer for (_, layer, _), _, _ in parsed)
    heads = 1 + max(head for (_, _, head), _, _ in parsed)
    at = {step: i for i, step in enumerate(steps)}
    table: dict[str, list] = {name: [[[None] * heads for _ in range(layers)] for _ in steps] for name in HEAD_SCORES
                              if any(where[0] == name for where, _, _ in parsed)}
    for (name, layer, head), step, value in parsed:
        table[name][at[step]][layer][head] = value
    val = dict(session.exec(select(Metric.step, Metric.val_loss)
                            .where(Metric.run_id == run_id, col(Metric.step).in_(steps))).all())
    return {"steps": steps, "layers": layers, "heads": heads, "scores": table,
            "val_loss": [val.get(step) for step in steps]}


def induction_figures(session: Session, *, run_id: int) -> dict:
    """What compare shows of a run's heads: the best head's induction score at its last recorded evaluation, and
    the first evaluation at which some head's reached ``INDUCTION_FORMED`` (None: never, or nothing recorded)."""
    recorded = scores_over_training(session, run_id=run_id, score="induction")
    per_step = [max((v for row in rows for v in row if v is not None), default=None)
                for rows in recorded["scores"].get("induction", [])]
    formed = next((step for step, best in zip(recorded["steps"], per_step, strict=True)
                   if best is not None and best >= INDUCTION_FORMED), None)
    return {"induction_score": per_step[-1] if per_step else None, "induction_formed_step": formed}
