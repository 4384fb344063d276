"""Runs of other trainers, read from what they leave behind: TensorBoard event files (read with TensorBoard's
own reader) and the log files of the speedrun scripts (nanoGPT's ``train.py``, llm.c's ``main.log``,
modded-nanogpt's logs). Each becomes :class:`ForeignLog`: every scalar by name, step and wall time, nothing
dropped; ``tinygpt.metric_names`` maps the names onto a run's columns.

>>> log = parse_log_lines(["step 0: train loss 10.9876, val loss 10.9912", "iter 0: loss 10.9800, time 812.34ms, mfu -100.00%"])
>>> log.source, [(p.name, p.step, p.value) for p in log.points]
('nanogpt', [('train loss', 0, 10.9876), ('val loss', 0, 10.9912), ('loss', 0, 10.98), ('iter_time_ms', 0, 812.34)])
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

#: The most points one file may bring (a run of 10 million steps logging a dozen values each).
MAX_POINTS = 20_000_000
EVENT_FILE = re.compile(r"events\.out\.tfevents\.")


class ForeignLogError(ValueError):
    """A file that is none of the formats read here: one line saying which were tried."""


@dataclass(frozen=True)
class Point:
    name: str
    step: int
    value: float
    wall_time: float | None = None  # seconds since the epoch, where the file says


@dataclass
class ForeignLog:
    source: str  # tensorboard, nanogpt, llmc, modded-nanogpt
    points: list[Point] = field(default_factory=list)
    total_steps: int | None = None  # the run's planned steps, where the log says (modded-nanogpt's step:S/T)

    def as_tuples(self) -> list[tuple[str, int, float, float | None]]:
        return [(p.name, p.step, p.value, p.wall_time) for p in self.points]


# -- speedrun logs ------------------------------------------------------------------------------
NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf"
# nanoGPT train.py: "step 250: train loss 4.1234, val loss 4.2345" and "iter 10: loss 4.5678, time 123.45ms, mfu 12.34%"
NANOGPT_EVAL = re.compile(rf"^step (\d+): train loss ({NUMBER}), val loss ({NUMBER})")
NANOGPT_ITER = re.compile(rf"^iter (\d+): loss ({NUMBER}), time ({NUMBER})ms(?:, mfu ({NUMBER})%)?")
# llm.c main.log: "s:0 tel:10.9864", "s:1 trl:10.9000 lr:0.000006 norm:12.34"
LLMC_LINE = re.compile(rf"^s:(\d+)((?: [A-Za-z_]+:(?:{NUMBER}))+)\s*$")
# modded-nanogpt: "step:125/1390 val_loss:4.2312 train_time:12345ms step_avg:98.76ms"
MODDED_LINE = re.compile(r"^step:(\d+)/(\d+)((?: [A-Za-z_]+:\S+)+)\s*$")
KEY_VALUE = re.compile(rf"([A-Za-z_]+):({NUMBER})(ms)?(?=\s|$)")


def _nanogpt(line: str) -> list[Point] | None:
    if m := NANOGPT_EVAL.match(line):
        step = int(m[1])
        return [Point("train loss", step, float(m[2])), Point("val loss", step, float(m[3]))]
    if m := NANOGPT_ITER.match(line):
        step = int(m[1])
        points = [Point("loss", step, float(m[2])), Point("iter_time_ms", step, float(m[3]))]
        if m[4] is not None and float(m[4]) >= 0:  # nanoGPT prints -100% before its first estimate
            points.append(Point("mfu", step, float(m[4])))  # percent, as its wandb log has it
        return points
    return None


def _llmc(line: str) -> list[Point] | None:
    if not (m := LLMC_LINE.match(line)):
        return None
    return [Point(k, int(m[1]), float(v)) for k, v, _ in KEY_VALUE.findall(m[2])]


def _modded(line: str) -> tuple[int, list[Point]] | None:
    if not (m := MODDED_LINE.match(line)):
        return None
    step, points = int(m[1]), []
    for key, value, ms in KEY_VALUE.findall(m[3]):
        if value == "nan":  # step_avg before its first measurement
            continue
        points.append(Point(f"{key}{'_ms' if ms and key != 'train_time' else ''}", step, float(value)))
    return int(m[2]), points


def parse_log_lines(lines: Iterable[str]) -> ForeignLog:
    """The points of a speedrun log; lines of other kinds (config dumps, banners) are passed over. The format
    is the first that a line matches: nanoGPT, llm.c or modded-nanogpt."""
    source: str | None = None
    log = ForeignLog(source="")
    for raw in lines:
        line = raw.strip()
        if source in (None, "nanogpt") and (found := _nanogpt(line)) is not None:
            source = "nanogpt"
            log.points += found
        elif source in (None, "llmc") and (found := _llmc(line)) is not None:
            source = "llmc"
            log.points += found
        elif source in (None, "modded-nanogpt") and (modded := _modded(line)) is not None:
            source = "modded-nanogpt"
            log.total_steps, found = modded
            log.points += found
        if len(log.points) > MAX_POINTS:
            raise ForeignLogError(f"more than {MAX_POINTS:,} values in one log")
    if source is None:
        raise ForeignLogError("no line of nanoGPT (step N: train loss X, val loss Y / iter N: loss X, time Tms), "
                              "llm.c (s:N trl:X / s:N tel:X) or modded-nanogpt (step:S/T val_loss:X ...) format")
    log.source = source
    return log


def read_log_file(path: Path) -> ForeignLog:
    with open(path, encoding="utf-8", errors="replace") as f:
        try:
            return parse_log_lines(f)
        except ForeignLogError as exc:
            raise ForeignLogError(f"{path}: {exc}") from None


# -- TensorBoard ----------------------------------------------------------------------------------
def event_files(path: Path) -> list[Path]:
    """The event files of a TensorBoard log folder (its subfolders too: ``add_scalars`` writes one per name)."""
    if path.is_file():
        return [path] if EVENT_FILE.match(path.name) else []
    return sorted(p for p in path.rglob("*") if p.is_file() and EVENT_FILE.match(p.name))


def is_tensorboard(path: Path) -> bool:
    return bool(event_files(path)) if path.exists() else False


def read_tensorboard(path: Path) -> ForeignLog:
    """Every scalar of every event file under ``path``, read by TensorBoard's ``EventAccumulator`` (all points,
    none sampled away). A file in a subfolder names its scalars ``subfolder/tag``."""
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    files = event_files(path)
    if not files:
        raise ForeignLogError(f"{path} holds no TensorBoard event file (events.out.tfevents.*)")
    log = ForeignLog(source="tensorboard")
    root = path if path.is_dir() else path.parent
    for file in files:
        accumulator = EventAccumulator(str(file), size_guidance={SCALARS: 0})  # 0: keep every point
        accumulator.Reload()
        prefix = "/".join(file.parent.relative_to(root).parts)
        for tag in accumulator.Tags()[SCALARS]:
            name = f"{prefix}/{tag}" if prefix else tag
            log.points += [Point(name, e.step, float(e.value), e.wall_time) for e in accumulator.Scalars(tag)]
            if len(log.points) > MAX_POINTS:
                raise ForeignLogError(f"more than {MAX_POINTS:,} values in {path}")
    if not log.points:
        raise ForeignLogError(f"{path}: its event files hold no scalars")
    return log


def read_foreign(path: Path) -> ForeignLog:
    """A TensorBoard folder or event file, else a speedrun log file."""
    if is_tensorboard(path):
        return read_tensorboard(path)
    if path.is_file():
        return read_log_file(path)
    raise ForeignLogError(f"{path} is neither a TensorBoard log folder nor a log file")
