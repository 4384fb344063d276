"""Values kept by name and step (``metric_series``): what other trainers log, and the heads' scores a run
records (``app/services/head_scores.py``)."""

from __future__ import annotations

import math

from sqlalchemy import text
from sqlmodel import Session

# one statement for SQLite and PostgreSQL alike: a value logged again at the same step replaces the earlier
UPSERT_POINT = text("""
INSERT INTO metric_series (run_id, name, step, value, is_nan, wall_time)
VALUES (:run_id, :name, :step, :value, :is_nan, :wall_time)
ON CONFLICT (run_id, name, step) DO UPDATE SET value = excluded.value, is_nan = excluded.is_nan,
                                               wall_time = excluded.wall_time
""")


def json_number(value: float) -> float | None:
    """A value as JSON holds it: infinities (which JSON has no word for) as None, like a NaN."""
    return value if math.isfinite(value) else None


def record_points(session: Session, *, run_id: int, points: list[dict]) -> None:
    """Values by name (``name``, ``step``, ``value``, ``wall_time``), each replacing one at its name and step."""
    if points:
        session.execute(UPSERT_POINT, [{"run_id": run_id, **p, "is_nan": math.isnan(p["value"]),
                                        "value": 0.0 if math.isnan(p["value"]) else p["value"]} for p in points])
