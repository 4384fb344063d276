"""Other trainers' runs read from their files: TensorBoard event files written by torch's own SummaryWriter, and
the log lines of nanoGPT, llm.c and modded-nanogpt, each value exactly as written; the names mapped onto a run's
columns by tinygpt.metric_names, the others kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from tinygpt.foreign_logs import (
    ForeignLogError,
    parse_log_lines,
    read_foreign,
    read_log_file,
    read_tensorboard,
)
from tinygpt.metric_names import column_for, mapped_rows, mapping_of

NANOGPT_LOG = """\
Overriding config with config/train_shakespeare_char.py:
tokens per iteration will be: 16,384
step 0: train loss 4.2874, val loss 4.2823
iter 0: loss 4.2654, time 29877.81ms, mfu -100.00%
iter 10: loss 3.2410, time 40.12ms, mfu 9.30%
step 250: train loss 1.9683, val loss 2.0645
saving checkpoint to out-shakespeare-char
iter 250: loss 2.0411, time 5321.07ms, mfu 9.18%
"""
LLMC_LOG = """\
s:0 tel:10.9864
s:0 trl:11.0090 lr:0.000006 norm:15.3012
s:1 trl:10.6120 lr:0.000012 norm:9.8800
s:250 tel:4.1217
s:250 trl:4.0550 lr:0.000600 norm:0.3300
s:250 eval:0.2633
"""
MODDED_LOG = """\
Running Python 3.12.7
step:0/1390 val_loss:10.8258 train_time:0ms step_avg:nanms
step:1/1390 train_time:93ms step_avg:nanms
step:2/1390 train_time:180ms step_avg:87.00ms
step:125/1390 val_loss:4.2312 train_time:12345ms step_avg:98.76ms
"""


def points(log) -> list[tuple]:
    return [(p.name, p.step, p.value) for p in log.points]


def test_nanogpt_lines_give_their_values_and_map_onto_the_columns():
    log = parse_log_lines(NANOGPT_LOG.splitlines())
    assert log.source == "nanogpt"
    assert points(log) == [
        ("train loss", 0, 4.2874), ("val loss", 0, 4.2823), ("loss", 0, 4.2654), ("iter_time_ms", 0, 29877.81),
        ("loss", 10, 3.2410), ("iter_time_ms", 10, 40.12), ("mfu", 10, 9.30),
        ("train loss", 250, 1.9683), ("val loss", 250, 2.0645), ("loss", 250, 2.0411), ("iter_time_ms", 250, 5321.07),
        ("mfu", 250, 9.18)]
    rows = mapped_rows(log.as_tuples(), tokens_per_step=16384)
    assert [(r["step"], r["train_loss"], r["val_loss"], r["tokens_seen"]) for r in rows] == [
        (0, 4.2654, 4.2823, 0), (10, 3.2410, None, 163840), (250, 2.0411, 2.0645, 4096000)]
    assert all(r["elapsed_sec"] is None and r["lr"] is None for r in rows)  # the log says neither


def test_llmc_main_log_keys_become_points():
    log = parse_log_lines(LLMC_LOG.splitlines())
    assert log.source == "llmc"
    assert points(log) == [("tel", 0, 10.9864), ("trl", 0, 11.0090), ("lr", 0, 0.000006), ("norm", 0, 15.3012),
                           ("trl", 1, 10.6120), ("lr", 1, 0.000012), ("norm", 1, 9.88), ("tel", 250, 4.1217),
                           ("trl", 250, 4.0550), ("lr", 250, 0.0006), ("norm", 250, 0.33), ("eval", 250, 0.2633)]
    rows = mapped_rows(log.as_tuples())
    assert [(r["step"], r["train_loss"], r["val_loss"], r["lr"]) for r in rows] == [
        (0, 11.0090, 10.9864, 0.000006), (1, 10.6120, None, 0.000012), (250, 4.0550, 4.1217, 0.0006)]
    assert mapping_of(p.name for p in log.points) == {"lr": "lr", "tel": "val_loss", "trl": "train_loss"}


def test_modded_nanogpt_steps_times_and_validation():
    log = parse_log_lines(MODDED_LOG.splitlines())
    assert (log.source, log.total_steps) == ("modded-nanogpt", 1390)
    assert points(log) == [("val_loss", 0, 10.8258), ("train_time", 0, 0.0), ("train_time", 1, 93.0),
                           ("train_time", 2, 180.0), ("step_avg_ms", 2, 87.0), ("val_loss", 125, 4.2312),
                           ("train_time", 125, 12345.0), ("step_avg_ms", 125, 98.76)]
    rows = mapped_rows(log.as_tuples())
    # no training loss in these logs: the row says so rather than inventing one; train_time (ms) is the seconds
    assert [(r["step"], r["train_loss"], r["val_loss"], r["elapsed_sec"]) for r in rows] == [
        (0, None, 10.8258, 0.0), (1, None, None, 0.093), (2, None, None, 0.18), (125, None, 4.2312, 12.345)]


def test_a_file_of_no_known_format_says_what_was_tried(tmp_path: Path):
    path = tmp_path / "notes.txt"
    path.write_text("epoch 1 done\nloss went down\n")
    with pytest.raises(ForeignLogError, match=r"notes.txt: no line of nanoGPT .* llm.c .* modded-nanogpt"):
        read_log_file(path)
    with pytest.raises(ForeignLogError, match="is neither a TensorBoard log folder nor a log file"):
        read_foreign(tmp_path / "missing")


def test_tensorboard_files_of_summarywriter_read_back_exactly(tmp_path: Path):
    from torch.utils.tensorboard import SummaryWriter

    logdir = tmp_path / "tb"
    writer = SummaryWriter(str(logdir))
    written = []
    for step in range(0, 60, 3):
        train = 5.0 - step / 64  # exactly representable in float32: read back equal
        writer.add_scalar("train/loss", train, step, walltime=1_700_000_000 + step)
        writer.add_scalar("mfu", step / 128, step, walltime=1_700_000_000 + step)
        written += [("train/loss", step, train), ("mfu", step, step / 128)]
        if step % 15 == 0:
            writer.add_scalar("val/loss", train + 0.25, step, walltime=1_700_000_000 + step)
            written.append(("val/loss", step, train + 0.25))
    writer.add_scalars("grad", {"norm": 0.5}, 57, walltime=1_700_000_057)  # a subfolder per name
    writer.close()
    log = read_tensorboard(logdir)
    assert log.source == "tensorboard" and read_foreign(logdir).source == "tensorboard"
    got = sorted(points(log))
    assert got == sorted([*written, ("grad_norm/grad", 57, 0.5)])
    rows = mapped_rows(log.as_tuples())
    assert len(rows) == 20 and [r["step"] for r in rows] == list(range(0, 60, 3))
    assert rows[5] == {"step": 15, "train_loss": 5.0 - 15 / 64, "val_loss": 5.0 - 15 / 64 + 0.25, "lr": None,
                       "tokens_per_sec": None, "elapsed_sec": 15.0, "tokens_seen": None, "epochs": None,
                       "peak_mem_mib": None, "val_loss_full": None}


@pytest.mark.parametrize(("name", "column"), [("train/loss", "train_loss"), ("val/loss", "val_loss"), ("loss", "train_loss"),
                                              ("lr", "lr"), ("tok_per_sec", "tokens_per_sec"), ("iter", None),
                                              ("mfu", None), ("val/bpb", None), ("VAL LOSS", "val_loss")])
def test_the_mapping_of_common_names(name, column):
    assert column_for(name) == column
