"""Block summaries of a run's metrics rows (``metric_blocks``), kept as the rows are written and read by thinned
charts (``app/services/metric_history.py``).

A level-``L`` block holds the run's steps ``[k * BLOCK_STEPS[L], (k + 1) * BLOCK_STEPS[L])``: how many rows, the
first and last step, the lowest and highest training loss. A chart of ``b`` buckets over ``s`` steps reads the
coarsest level whose blocks still fit in a bucket (``BLOCK_STEPS[L] <= s / b``), so a million rows cost a few
thousand blocks; spans too short for any level are read row by row (then at most 64 rows a bucket).
"""

from __future__ import annotations

from sqlalchemy import delete, func, insert, literal, text
from sqlmodel import Session, col, select

from ..models import Metric, MetricBlock

BLOCK_STEPS = (64, 4096)
KEY = ("run_id", "level", "block")  # the table's primary key


def level_for(span: int, buckets: int) -> int | None:
    """The coarsest level whose blocks fit ``buckets`` times into ``span`` steps (None: read rows)."""
    fitting = [level for level, size in enumerate(BLOCK_STEPS) if size * buckets <= span]
    return fitting[-1] if fitting else None


# one statement for SQLite (3.24 on) and PostgreSQL alike: the block exists, or starts here
ADD_ROW = text("""
INSERT INTO metric_blocks (run_id, level, block, first_step, last_step, rows, min_train_loss, max_train_loss)
VALUES (:run_id, :level, :block, :step, :step, 1, :loss, :loss)
ON CONFLICT (run_id, level, block) DO UPDATE SET
  first_step = CASE WHEN excluded.first_step < metric_blocks.first_step
                    THEN excluded.first_step ELSE metric_blocks.first_step END,
  last_step = CASE WHEN excluded.last_step > metric_blocks.last_step
                   THEN excluded.last_step ELSE metric_blocks.last_step END,
  rows = metric_blocks.rows + 1,
  min_train_loss = CASE WHEN metric_blocks.min_train_loss IS NULL OR excluded.min_train_loss < metric_blocks.min_train_loss
                        THEN excluded.min_train_loss ELSE metric_blocks.min_train_loss END,
  max_train_loss = CASE WHEN metric_blocks.max_train_loss IS NULL OR excluded.max_train_loss > metric_blocks.max_train_loss
                        THEN excluded.max_train_loss ELSE metric_blocks.max_train_loss END
""")


def add_row(session: Session, *, run_id: int, step: int, train_loss: float | None) -> None:
    """Count one new metrics row in its block of every level (one statement, run for each level)."""
    session.execute(ADD_ROW, [{"run_id": run_id, "level": level, "block": step // size, "step": step,
                               "loss": train_loss} for level, size in enumerate(BLOCK_STEPS)])


def rebuild_blocks(session: Session, *, run_id: int, from_step: int = 0) -> None:
    """Sum up again, from its rows, every block of the run that holds ``from_step`` or a later step (after
    rows were written in bulk, or deleted from a step on)."""
    for level, size in enumerate(BLOCK_STEPS):
        first_block = from_step // size
        session.execute(delete(MetricBlock).where(col(MetricBlock.run_id) == run_id, col(MetricBlock.level) == level,
                                                  col(MetricBlock.block) >= first_block))
        block = col(Metric.step) // size
        summed = (select(col(Metric.run_id), literal(level), block, func.min(Metric.step), func.max(Metric.step),
                         func.count(), func.min(Metric.train_loss), func.max(Metric.train_loss))
                  .where(col(Metric.run_id) == run_id, col(Metric.step) >= first_block * size)
                  .group_by(col(Metric.run_id), block))
        session.execute(insert(MetricBlock).from_select(
            [*KEY, "first_step", "last_step", "rows", "min_train_loss", "max_train_loss"], summed))
