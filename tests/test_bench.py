"""The hardware benchmark sweep (tinygpt.bench), on the CPU."""

from __future__ import annotations

import pytest
import torch

from tinygpt import bench
from tinygpt.bench import Cell, SweepConfig, format_table, plan, sweep


def tiny_sweep(**overrides: object) -> SweepConfig:
    base = {"preset": "tiny", "device": "cpu", "batch_sizes": [2, 4], "precisions": ["fp32"], "steps": 1, "warmup": 0}
    return SweepConfig(**{**base, **overrides})


def test_plan_orders_threads_then_precisions_then_batch_sizes():
    cells = plan(tiny_sweep(precisions=["fp32", "bf16"], threads=[1, 2]), torch.device("cpu"))
    assert [(c.threads, c.precision, c.batch_size) for c in cells] == [
        (1, "fp32", 2), (1, "fp32", 4), (1, "bf16", 2), (1, "bf16", 4),
        (2, "fp32", 2), (2, "fp32", 4), (2, "bf16", 2), (2, "bf16", 4),
    ]


@pytest.mark.parametrize("has_bf16, expected", [(True, ["fp32", "bf16"]), (False, ["fp32"])])
def test_cpu_sweeps_bf16_only_where_the_cpu_has_it(monkeypatch, has_bf16, expected):
    monkeypatch.setattr(bench.dev, "cpu_has_bf16", lambda: has_bf16)
    assert bench.default_precisions(torch.device("cpu")) == expected
    assert [c.precision for c in plan(tiny_sweep(precisions=None, batch_sizes=[8]), torch.device("cpu"))] == expected


def test_sweep_measures_every_cell_and_reports_each_one():
    seen = []
    cells = sweep(tiny_sweep(threads=[1, 2]), on_cell=lambda i, n, c: seen.append((i, n, c.batch_size, c.threads)))
    assert seen == [(0, 4, 2, 1), (1, 4, 4, 1), (2, 4, 2, 2), (3, 4, 4, 2)]
    for c in cells:
        assert not c.oom and c.tokens_per_sec > 0 and c.ms_per_step > 0 and c.peak_mem_mib > 50
        assert c.tokens_per_sec == pytest.approx(c.batch_size * 128 / (c.ms_per_step / 1000))
    assert "threads" in format_table(cells).splitlines()[0]


def test_thread_count_is_restored_after_each_cell():
    before = torch.get_num_threads()
    sweep(tiny_sweep(batch_sizes=[2], threads=[1]))
    assert torch.get_num_threads() == before


def test_out_of_memory_is_recorded_and_the_sweep_goes_on(monkeypatch):
    real = bench.time_steps

    def fake(config, device, precision, batch_size):  # noqa: ANN001, ANN202
        if batch_size == 4:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(config, device, precision, batch_size)

    monkeypatch.setattr(bench, "time_steps", fake)
    cells = sweep(tiny_sweep(batch_sizes=[2, 4, 2]))
    assert [c.oom for c in cells] == [False, True, False]
    assert cells[1].error == "CUDA out of memory. Tried to allocate 2.00 GiB" and cells[1].tokens_per_sec is None
    assert format_table(cells).splitlines()[2].split() == ["fp32", "4", "default", "OOM", "-", "-"]


def test_other_errors_are_not_taken_for_out_of_memory(monkeypatch):
    monkeypatch.setattr(bench, "time_steps", lambda *a: (_ for _ in ()).throw(ValueError("broken")))
    with pytest.raises(ValueError, match="broken"):
        sweep(tiny_sweep())


def test_should_stop_ends_the_sweep_between_cells():
    calls = []
    cells = sweep(tiny_sweep(batch_sizes=[2, 2, 2]), on_cell=lambda i, n, c: calls.append(i),
                  should_stop=lambda: len(calls) >= 1)
    assert len(cells) == 1


@pytest.mark.parametrize("overrides, message", [
    ({"batch_sizes": [0]}, "batch_sizes must be positive integers"),
    ({"threads": [2, -1]}, "threads must be positive integers"),
    ({"precisions": ["fp8"]}, "unknown precision 'fp8'"),
    ({"preset": "huge"}, "unknown preset 'huge'"),
    ({"steps": 0}, "steps must be >= 1"),
])
def test_bad_sweeps_name_the_problem(overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny_sweep(**overrides).validate()


def test_cell_dict_has_the_json_fields():
    assert list(Cell("fp32", 8, None).to_dict())[: len(bench.CELL_FIELDS)] == bench.CELL_FIELDS
