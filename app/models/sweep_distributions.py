"""W&B's sweep parameter distributions, each with its W&B meaning: the keys it takes and its quantile function.

A W&B parameter is ``value``, ``values`` (with ``probabilities`` or not), or a ``distribution`` with its keys.
Optuna samples ``int_uniform``, ``uniform``, ``log_uniform_values`` and plain ``values`` natively; for every
other distribution it samples a quantile ``u`` in [0, 1] and the trial gets ``ppf(u)``, W&B's own quantile
function (wandb/sweeps ``HyperParameter.ppf``): so random search draws exactly W&B's distribution, and TPE
models the quantile, as W&B's Bayesian search models each parameter's CDF. The normal family has no bounds;
a run option has, so those are drawn from their central 99.8 % (quantiles 0.001 to 0.999), and a sweep is
refused when that range leaves the option's bounds.

>>> ppf({"distribution": "q_log_uniform_values", "min": 16, "max": 256, "q": 8}, 0.5)
64
>>> round(ppf({"distribution": "normal", "mu": 0.1, "sigma": 0.02}, 0.975), 4)
0.1392
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import accumulate
from statistics import NormalDist
from typing import Any

from scipy.stats import beta as beta_distribution  # the beta's quantile function (scipy: already the app's)

UNBOUNDED_QUANTILES = (0.001, 0.999)  # the normal family's draws: its central 99.8 %


@dataclass(frozen=True)
class Distribution:
    required: tuple[str, ...]  # keys the parameter must give
    defaults: dict[str, float]  # keys it may give, with W&B's defaults
    native: bool = False  # Optuna samples it itself (no quantile)
    unbounded: bool = False  # drawn from UNBOUNDED_QUANTILES
    meaning: str = ""


def _bounds(meaning: str, **kw: Any) -> Distribution:
    return Distribution(("min", "max"), {}, meaning=meaning, **kw)


def _quantized(meaning: str, required: tuple[str, ...] = ("min", "max"), unbounded: bool = False,
               **defaults: float) -> Distribution:
    return Distribution(required, {**defaults, "q": 1}, unbounded=unbounded,
                        meaning=meaning + ", rounded to a multiple of q")


NORMAL = {"mu": 0.0, "sigma": 1.0}
BETA = {"a": 1.0, "b": 1.0}
#: Every W&B distribution, by the name a W&B config gives it.
DISTRIBUTIONS: dict[str, Distribution] = {
    "constant": Distribution(("value",), {}, native=True, meaning="value, always"),
    "categorical": Distribution(("values",), {}, native=True, meaning="one of values, each as likely"),
    "categorical_w_probabilities": Distribution(("values", "probabilities"), {},
                                                meaning="one of values, each with its probability"),
    "uniform": _bounds("a number from min to max", native=True),
    "int_uniform": _bounds("a whole number from min to max", native=True),
    "q_uniform": _quantized("uniform"),
    "log_uniform_values": _bounds("from min to max, its logarithm uniform", native=True),
    "q_log_uniform_values": _quantized("log_uniform_values"),
    "log_uniform": _bounds("exp(x), x uniform from min to max (natural logarithms)"),
    "q_log_uniform": _quantized("log_uniform"),
    "inv_log_uniform_values": _bounds("1/x, x log-uniform from 1/max to 1/min"),
    "inv_log_uniform": _bounds("exp(-x), x uniform from min to max"),
    "normal": Distribution((), NORMAL, unbounded=True, meaning="normal with mean mu and deviation sigma"),
    "q_normal": _quantized("normal", (), unbounded=True, **NORMAL),
    "log_normal": Distribution((), NORMAL, unbounded=True, meaning="exp(x), x normal(mu, sigma)"),
    "q_log_normal": _quantized("log_normal", (), unbounded=True, **NORMAL),
    "beta": Distribution((), BETA, meaning="beta with shapes a and b"),
    "q_beta": _quantized("beta", (), **BETA),
}


def inferred(p: dict) -> str:
    """The distribution of a parameter that names none, as W&B infers it from its keys."""
    if p.get("value") is not None:
        return "constant"
    if p.get("values") is not None:
        return "categorical_w_probabilities" if p.get("probabilities") is not None else "categorical"
    whole = all(isinstance(p.get(k), int) and not isinstance(p.get(k), bool) for k in ("min", "max"))
    return "int_uniform" if whole else "uniform"


def filled(p: dict) -> dict:
    """The parameter with its distribution named and W&B's defaults written in; ValueError naming what is wrong.

    >>> filled({"distribution": "normal", "sigma": 0.5})
    {'distribution': 'normal', 'mu': 0.0, 'sigma': 0.5}
    """
    given = {k: v for k, v in p.items() if v is not None}
    if not given:
        raise ValueError("give value, values, min and max, or a distribution")
    name = given.pop("distribution", None) or inferred(given)
    if name == "categorical" and given.get("probabilities") is not None:
        name = "categorical_w_probabilities"
    kind = DISTRIBUTIONS.get(name)
    if kind is None:
        raise ValueError(f"distribution must be one of {', '.join(DISTRIBUTIONS)}")
    allowed = (*kind.required, *kind.defaults)
    stray = [k for k in given if k not in allowed]
    if stray:
        takes = " and ".join(allowed) if allowed else "nothing else"
        raise ValueError(f"{name} takes {takes}, not {' or '.join(stray)} ({kind.meaning})")
    missing = [k for k in kind.required if k not in given]
    if missing:
        raise ValueError(f"{name} needs {' and '.join(missing)} ({kind.meaning})")
    out = {"distribution": name, **kind.defaults, **given}
    check(name, out)
    return out


def check(name: str, p: dict) -> None:
    """The rules between a distribution's keys (W&B's schema's): ValueError naming the broken one."""
    if "min" in p and p["min"] >= p["max"]:
        raise ValueError("a range needs min < max")
    if name == "int_uniform" and not all(isinstance(p[k], int) for k in ("min", "max")):
        raise ValueError("int_uniform needs whole numbers for min and max")
    if name.endswith("_values") and p["min"] <= 0:
        raise ValueError(f"{name} needs min > 0")
    if p.get("q", 1) <= 0 or p.get("sigma", 1) <= 0 or p.get("a", 1) <= 0 or p.get("b", 1) <= 0:
        raise ValueError(f"{name}'s q, sigma, a and b must be more than 0")
    if name == "categorical_w_probabilities":
        chances = p["probabilities"]
        if len(chances) != len(p["values"]) or any(c < 0 for c in chances) or not math.isclose(sum(chances), 1.0):
            raise ValueError(f"probabilities must be one per value, none below 0, summing to 1 (got {chances})")


def quantile_range(p: dict) -> tuple[float, float]:
    """The quantiles a trial's draw comes from (Optuna's search space for this parameter)."""
    return UNBOUNDED_QUANTILES if DISTRIBUTIONS[p["distribution"]].unbounded else (0.0, 1.0)


def _quantize(value: float, q: int | float) -> int | float:
    steps = round(value / q)  # W&B: np.round(r / q) * q, integers when q is one
    return steps * q if isinstance(q, int) else round(steps * q, 12)  # 12 places: 0.30000000000000004 -> 0.3


def _continuous(p: dict, u: float) -> float:
    name = p["distribution"].removeprefix("q_")
    if name in ("uniform", "log_uniform", "inv_log_uniform"):
        x = p["min"] + (1 - u if name == "inv_log_uniform" else u) * (p["max"] - p["min"])
        return x if name == "uniform" else math.exp(x if name == "log_uniform" else -x)
    if name in ("log_uniform_values", "inv_log_uniform_values"):  # both log-uniform from min to max
        return math.exp(math.log(p["min"]) + u * (math.log(p["max"]) - math.log(p["min"])))
    if name == "beta":
        return float(beta_distribution.ppf(u, p["a"], p["b"]))
    x = NormalDist(p["mu"], p["sigma"]).inv_cdf(min(max(u, 1e-12), 1 - 1e-12))
    return x if name == "normal" else math.exp(x)


def ppf(p: dict, u: float) -> Any:
    """The value at quantile ``u`` of a filled parameter (W&B's ``HyperParameter.ppf``).

    >>> ppf({"distribution": "categorical_w_probabilities", "values": ["a", "b"], "probabilities": [0.2, 0.8]}, 0.19)
    'a'
    >>> ppf({"distribution": "inv_log_uniform", "min": 0, "max": 2}, 1.0)
    1.0
    """
    name = p["distribution"]
    if name == "categorical_w_probabilities":
        cumulative = list(accumulate(p["probabilities"]))
        return p["values"][next((i for i, c in enumerate(cumulative) if u < c), len(cumulative) - 1)]
    value = _continuous(p, u)
    return _quantize(value, p["q"]) if name.startswith("q_") else value


def gives_whole_numbers(p: dict) -> bool:
    """Whether every value the parameter can take is an int (int_uniform, or a q_ distribution with a whole q)."""
    name = p["distribution"]
    return name == "int_uniform" or (name.startswith("q_") and isinstance(p["q"], int))
