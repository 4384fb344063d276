import logging
import platform
import subprocess
import sys

import pytest
import torch

from tinygpt import device as dev


def test_cpu_and_auto_resolve_to_cpu_here():
    assert dev.resolve_device("cpu") == torch.device("cpu")
    if not torch.cuda.is_available() and not dev.mps_available():
        assert dev.resolve_device("auto") == torch.device("cpu")


@pytest.mark.parametrize("name", ["cuda", "cuda:3", "mps", "xla"])
def test_missing_backend_falls_back_to_cpu_with_a_warning(name, caplog, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(dev, "mps_available", lambda: False)
    monkeypatch.setattr(dev, "xla_available", lambda: False)
    with caplog.at_level(logging.WARNING, logger="tinygpt.device"):
        assert dev.resolve_device(name) == torch.device("cpu")
    assert "running on the CPU instead" in caplog.text


@pytest.mark.parametrize("name", ["gpu", "cuda:x", "", "tpu"])
def test_unknown_device_names_are_errors(name):
    with pytest.raises(ValueError, match="unknown device"):
        dev.resolve_device(name)


def test_describe_cpu():
    info = dev.describe_device(torch.device("cpu"))
    assert info["torch"] == torch.__version__
    assert info["type"] == "cpu" and info["threads"] == torch.get_num_threads() and info["name"]


def test_available_devices_lists_cpu_and_says_why_others_are_missing():
    devices = {d["device"]: d for d in dev.available_devices()}
    assert devices["cpu"]["available"] and devices["cpu"]["description"]["type"] == "cpu"
    for d in devices.values():
        assert d["available"] or d["reason"]


def test_precision_resolution(monkeypatch):
    cpu = torch.device("cpu")
    assert dev.resolve_precision("fp32", cpu) == "fp32"
    assert dev.resolve_precision("bf16", cpu) == "bf16"
    monkeypatch.setattr(dev, "cpu_prefers_bf16", lambda: True)
    assert dev.resolve_precision("auto", cpu) == "bf16"
    monkeypatch.setattr(dev, "cpu_prefers_bf16", lambda: False)
    assert dev.resolve_precision("auto", cpu) == "fp32"
    with pytest.raises(ValueError, match="unknown precision 'fp8'"):
        dev.resolve_precision("fp8", cpu)


@pytest.mark.parametrize("flags, expected", [
    ({"sse4_2", "avx", "avx2", "fma"}, "fp32"),  # bf16 emulated: fp32
    ({"avx2", "fma", "avx512f", "avx512_bf16"}, "bf16"),
    ({"avx2", "fma", "avx512f", "amx_tile", "amx_bf16"}, "bf16"),
    ({"fp", "asimd", "bf16"}, "bf16"),  # ARM's bf16 extension
    ({"fp", "asimd"}, "fp32"),
    (set(), "fp32"),  # no /proc/cpuinfo (macOS): fp32
])
def test_auto_precision_on_the_cpu_is_a_rule_from_its_flags_never_a_timing(monkeypatch, flags, expected):
    monkeypatch.setattr(dev, "cpu_flags", lambda: flags)
    monkeypatch.setattr(torch, "randn", lambda *a, **k: pytest.fail("no timed probe expected"))
    answers = {dev.resolve_precision("auto", torch.device("cpu")) for _ in range(5)}
    assert answers == {expected}


@pytest.mark.parametrize("flags, listed, summary", [
    ({"sse4_2", "avx", "avx2", "fma", "f16c"}, ["avx2", "fma"],
     "avx2 fma; bf16 emulated (no AVX512-BF16 or AMX); precision auto = fp32"),
    ({"avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16"},
     ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16"],
     "avx2 fma avx512f avx512_vnni avx512_bf16 amx_tile amx_bf16; bf16 in hardware; precision auto = bf16"),
    ({"fp", "asimd", "bf16"}, ["asimd", "bf16"], "asimd bf16; bf16 in hardware; precision auto = bf16"),
])
def test_cpu_summary_names_the_flags_and_what_auto_picks(monkeypatch, flags, listed, summary):
    monkeypatch.setattr(dev, "cpu_flags", lambda: flags)
    assert dev.cpu_speed_flags() == listed
    assert dev.cpu_summary() == summary


def test_autocast_bf16_changes_matmul_dtype():
    a = torch.randn(4, 4)
    with dev.autocast(torch.device("cpu"), "bf16"):
        assert (a @ a).dtype == torch.bfloat16
    with dev.autocast(torch.device("cpu"), "fp32"):
        assert (a @ a).dtype == torch.float32


def test_threads_and_peak_memory():
    before = torch.get_num_threads()
    try:
        dev.set_threads(1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert dev.peak_memory_mib(torch.device("cpu")) > 10


FAULTS_OF_FIVE_LARGE_TENSORS = """
import resource, sys, torch
from tinygpt.device import keep_freed_memory
if sys.argv[1] == "kept":
    assert keep_freed_memory()
def cycle():  # 64 MiB, over glibc's largest threshold for mapping an allocation on its own; written, freed
    x = torch.empty(16 * 2**20)
    x.fill_(1.0)
    del x
for _ in range(10):  # the steady state a training step reaches: glibc's aligned allocations settle in a few
    cycle()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    cycle()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc",
                    reason="glibc's allocator only")
def test_keep_freed_memory_reuses_a_large_freed_tensor_instead_of_faulting_it_in_again():
    def faults(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", FAULTS_OF_FIVE_LARGE_TENSORS, mode], capture_output=True,
                             text=True, check=True)
        return int(out.stdout)

    # 64 MiB is 16,384 pages of 4 KiB: faulted in at every write of a fresh mapping, none once the heap keeps them
    assert faults("default") >= 5 * 16_384 * 0.9
    assert faults("kept") < 1_000
