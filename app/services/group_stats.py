"""Groups of runs (the same options over seeds, or runs sharing an option's value): each figure's mean, standard
deviation and count, and for two groups their difference with a 95 % confidence interval (Welch's t, which does
not assume equal variances), said in a sentence: is it larger than the seed noise?

>>> Spread.of([3.70, 3.72, 3.74])
Spread(mean=3.72, std=0.02, n=3)
>>> d = welch([3.70, 3.72, 3.74], [3.71, 3.73, 3.75])
>>> round(d.difference, 4), round(d.half_width, 4), round(d.dof, 1)
(0.01, 0.0453, 4.0)
>>> verdict("H200", "CPU", "best validation loss", d, 3, 3)
'H200 - CPU best validation loss: +0.010 +/- 0.045 (3 runs each): within seed noise'
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Spread:
    mean: float
    std: float | None  # the sample standard deviation (n - 1); None for a single run
    n: int

    @classmethod
    def of(cls, values: Iterable[float | None]) -> Spread | None:
        """The spread of the values that are known (None where no run has the figure)."""
        known = [v for v in values if v is not None and math.isfinite(v)]
        if not known:
            return None
        std = statistics.stdev(known) if len(known) > 1 else None
        return cls(round(statistics.fmean(known), 12), None if std is None else round(std, 12), len(known))


@dataclass(frozen=True)
class Difference:
    difference: float  # mean of the second group minus the first's
    half_width: float | None  # of the 95 % interval; None with fewer than two runs in a group
    dof: float | None  # Welch-Satterthwaite degrees of freedom; None without two runs a group, or without spread

    @property
    def low(self) -> float | None:
        return None if self.half_width is None else self.difference - self.half_width

    @property
    def high(self) -> float | None:
        return None if self.half_width is None else self.difference + self.half_width

    @property
    def within_noise(self) -> bool | None:
        """Whether the interval holds zero: a difference the seeds alone could make."""
        return None if self.half_width is None else abs(self.difference) <= self.half_width


def welch(first: list[float], second: list[float], confidence: float = CONFIDENCE) -> Difference | None:
    """``mean(second) - mean(first)`` with Welch's interval: standard error sqrt(s1²/n1 + s2²/n2), degrees of
    freedom by Welch-Satterthwaite, Student's t quantile. None when a group has no value."""
    if not first or not second:
        return None
    difference = statistics.fmean(second) - statistics.fmean(first)
    if len(first) < 2 or len(second) < 2:
        return Difference(difference, None, None)
    v1, v2 = statistics.variance(first) / len(first), statistics.variance(second) / len(second)
    if v1 + v2 == 0:  # identical runs in each group: no noise at all (and no degrees of freedom to speak of)
        return Difference(difference, 0.0, None)
    dof = (v1 + v2) ** 2 / (v1**2 / (len(first) - 1) + v2**2 / (len(second) - 1))
    from scipy import stats  # Student's t quantile; imported here, not with the app (0.5 s)

    return Difference(difference, float(stats.t.ppf(0.5 + confidence / 2, dof)) * math.sqrt(v1 + v2), dof)


def verdict(second: str, first: str, figure: str, d: Difference, n_first: int, n_second: int) -> str:
    """The sentence under the table: "H200 - CPU best validation loss: -0.004 +/- 0.011 (3 runs each): within
    seed noise"."""
    runs = f"{n_first} runs each" if n_first == n_second else f"{n_second} and {n_first} runs"
    if d.half_width is None:
        return f"{second} - {first} {figure}: {d.difference:+.3f} ({runs}): too few runs to tell; repeat each over 2 seeds or more"
    said = "within seed noise" if d.within_noise else "larger than seed noise"
    return f"{second} - {first} {figure}: {d.difference:+.3f} +/- {d.half_width:.3f} ({runs}): {said}"
