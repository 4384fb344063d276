"""Run options as data: each training option's type, default, range or choices, unit, help, group and
whether it is advanced, declared once (on :class:`tinygpt.run_config.TrainConfig`'s fields, through
:func:`option`) and read from here by every layer: the config's own check, the ``tinygpt train``
flags, the dashboard's API model and form, and the README's table.

>>> spec = Option(name="lr", kind=float, default=1e-3, help="peak learning rate", group="optimisation", gt=0, le=1)
>>> spec.check(0.01)
0.01
>>> spec.check(5.0)
Traceback (most recent call last):
...
ValueError: lr must be in (0, 1], got 5.0
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

#: The groups, in the order the form and ``tinygpt train --help`` show them.
GROUPS = ("model", "data and device", "optimisation", "schedule", "evaluation and samples")


@dataclass(frozen=True)
class Option:
    """One run option. ``none``: what leaving it unset (None) means, e.g. "the preset's"; options
    without it must be given a value."""

    name: str
    kind: type
    default: Any
    help: str
    group: str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[str, ...] | None = None
    max_length: int | None = None  # text options
    unit: str | None = None
    none: str | None = None
    advanced: bool = False
    applies_with: tuple[str, Any] | None = None  # (option, value): takes effect only when that option has it

    def applies(self, config: dict[str, Any]) -> bool:
        """Whether this option takes effect in a run's options (each option given or at its default).

        >>> muon_lr = Option(name="muon_lr", kind=float, default=0.02, help="", group="optimisation",
        ...                  applies_with=("optimizer", "muon"))
        >>> muon_lr.applies({"optimizer": "adamw"}), muon_lr.applies({"optimizer": "muon"})
        (False, True)
        """
        return self.applies_with is None or config.get(self.applies_with[0]) == self.applies_with[1]

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def minimum(self) -> float | None:
        return self.ge if self.ge is not None else self.gt

    @property
    def maximum(self) -> float | None:
        return self.le if self.le is not None else self.lt

    def range_text(self) -> str:
        """e.g. ``in (0, 1]``, ``in [1, 10000000]``, ``>= 0``; '' when unbounded."""
        low = f"[{fmt(self.ge)}" if self.ge is not None else f"({fmt(self.gt)}" if self.gt is not None else None
        high = f"{fmt(self.le)}]" if self.le is not None else f"{fmt(self.lt)})" if self.lt is not None else None
        if low and high:
            return f"in {low}, {high}"
        if low:
            return f"{'>=' if self.ge is not None else '>'} {low[1:]}"
        if high:
            return f"{'<=' if self.le is not None else '<'} {high[:-1]}"
        return ""

    def check(self, value: Any) -> Any:
        """``value`` if this option accepts it, else ValueError with the one message every layer shows."""
        if value is None:
            if self.none is None:
                raise ValueError(f"{self.name} needs a value")
            return None
        if self.kind is bool:
            if not isinstance(value, bool):
                raise ValueError(f"{self.name} must be true or false, got {value!r}")
            return value
        if self.kind is str:
            if not isinstance(value, str):
                raise ValueError(f"{self.name} must be text, got {value!r}")
            if self.choices is not None and value not in self.choices:
                raise ValueError(f"{self.name} must be one of {', '.join(self.choices)}; got {value!r}")
            if self.max_length is not None and len(value) > self.max_length:
                raise ValueError(f"{self.name} must be at most {self.max_length} characters, got {len(value)}")
            return value
        return self._check_number(value)

    def _check_number(self, value: Any) -> int | float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{self.name} must be a number, got {value!r}")
        if self.kind is int and (isinstance(value, float) and not value.is_integer()):
            raise ValueError(f"{self.name} must be a whole number, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{self.name} must be a finite number, got {value!r}")
        value = self.kind(value)
        inside = ((self.ge is None or value >= self.ge) and (self.gt is None or value > self.gt)
                  and (self.le is None or value <= self.le) and (self.lt is None or value < self.lt))
        if not inside:
            raise ValueError(f"{self.name} must be {self.range_text()}, got {value!r}")
        return value

    def parse(self, text: str) -> Any:
        """A command-line value (text) as this option's type, checked."""
        if self.kind is bool:
            raise TypeError("boolean options are flags")
        if self.kind is str:
            return self.check(text)
        try:
            number = float(text) if self.kind is float else int(text)
        except ValueError:
            raise ValueError(f"{self.name} must be a {'number' if self.kind is float else 'whole number'}, "
                             f"got {text!r}") from None
        return self.check(number)


def fmt(number: float | None) -> str:
    """A bound as the messages write it.

    >>> fmt(10_000_000), fmt(0.5), fmt(1e-4)
    ('10000000', '0.5', '0.0001')
    """
    return "" if number is None else (f"{number:g}" if isinstance(number, float) and number < 1e-4 else
                                      str(int(number)) if float(number).is_integer() else repr(number))


#: What other tools call some of these options (nanoGPT, Hugging Face, Keras): a guess by one of these names is
#: answered with ours.
OTHER_NAMES = {
    "learning_rate": "lr", "max_lr": "lr", "max_iters": "steps", "max_steps": "steps", "iters": "steps",
    "num_steps": "steps", "n_layer": "n_layers", "num_layers": "n_layers", "n_head": "n_heads",
    "num_heads": "n_heads", "n_embd": "d_model", "hidden_size": "d_model", "block_size": "context",
    "seq_len": "context", "context_length": "context", "max_seq_len": "context", "warmup_iters": "warmup",
    "warmup_steps": "warmup", "eval_interval": "eval_every", "eval_iters": "eval_batches",
    "log_interval": "log_every", "gradient_accumulation_steps": "grad_accum", "batch": "batch_size",
    "dtype": "precision", "seeds": "seed", "random_seed": "seed", "epochs": "steps",
}


def did_you_mean(name: str, known: Iterable[str]) -> str | None:
    """The known name someone who wrote ``name`` most likely meant, or None.

    >>> did_you_mean("learning_rate", ["lr", "steps"]), did_you_mean("step", ["lr", "steps"]), did_you_mean("x", ["lr"])
    ('lr', 'steps', None)
    """
    known = list(known)
    other = OTHER_NAMES.get(name.lower())
    if other in known:
        return other
    close = difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.6)
    return close[0] if close else None


def unknown_name_message(name: str, known: Iterable[str], what: str = "field") -> str:
    """e.g. "unknown field 'learning_rate': did you mean 'lr'?" (the one message every layer shows)."""
    guess = did_you_mean(name, known)
    return f"unknown {what} {name!r}" + (f": did you mean {guess!r}?" if guess else "")


def option(default: Any, help: str, group: str, **spec: Any) -> Any:
    """A dataclass field that is a run option (``TrainConfig``'s fields): its declaration in metadata."""
    assert group in GROUPS, group
    return field(default=default, metadata={"option": {"help": help, "group": group, **spec}})


def options_of(config_class: type) -> dict[str, Option]:
    """The :class:`Option` of every field declared with :func:`option`, in declaration order."""
    from dataclasses import MISSING, fields
    from typing import get_type_hints

    hints = get_type_hints(config_class)
    out = {}
    for f in fields(config_class):
        if "option" not in f.metadata:
            continue
        kind = next(t for t in getattr(hints[f.name], "__args__", (hints[f.name],)) if t is not type(None))
        default = None if f.default is MISSING else f.default
        out[f.name] = Option(name=f.name, kind=kind, default=default, **f.metadata["option"])
    return out


def markdown_table(options: dict[str, Option]) -> str:
    """The options as the README's table (``python -m tinygpt.options`` prints it)."""
    rows = ["| option (`tinygpt train` flag) | group | default | accepts | what |", "|---|---|---|---|---|"]
    for spec in options.values():
        default = f"unset: {spec.none}" if spec.default is None else f"`{spec.default}`"
        accepts = ("one of " + ", ".join(f"`{c}`" for c in spec.choices) if spec.choices else
                   "on/off" if spec.kind is bool else
                   " ".join(filter(None, [spec.range_text(), spec.unit])) or spec.kind.__name__)
        advanced = " (advanced)" if spec.advanced else ""
        rows.append(f"| `{spec.name}` (`{spec.flag}`) | {spec.group}{advanced} | {default} | {accepts} | {spec.help} |")
    return "\n".join(rows)


if __name__ == "__main__":
    from .run_config import OPTIONS

    print(markdown_table(OPTIONS))


def option_value_text(value: object) -> str:
    """An option's value for people (pages, group labels): unset as "–" (never Python's None), booleans as on/off.

    >>> [option_value_text(v) for v in (None, True, 0.001, "cpu")]
    ['–', 'on', '0.001', 'cpu']
    """
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)
