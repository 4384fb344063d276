"""What the ``device`` and ``precision`` options may say, checked without torch (the dashboard checks them in
a request; :mod:`tinygpt.device` turns them into torch devices and number formats).

>>> check_device_name(" CUDA:1 ")
'cuda:1'
>>> check_precision_name("bf16")
'bf16'
"""

from __future__ import annotations

from typing import Literal

DEVICE_CHOICES = ("auto", "cpu", "cuda", "mps", "xla")  # plus "cuda:N"
PRECISION_CHOICES = ("auto", "fp32", "bf16", "fp16")
Precision = Literal["fp32", "bf16", "fp16"]


def check_device_name(name: str) -> str:
    """Normalise a device name or raise ValueError naming the allowed forms."""
    name = name.strip().lower()
    if name in DEVICE_CHOICES:
        return name
    if name.startswith("cuda:") and name[5:].isdigit():
        return name
    raise ValueError(f"unknown device {name!r}; use auto, cpu, cuda, cuda:N, mps or xla")


def check_precision_name(name: str) -> str:
    if name not in PRECISION_CHOICES:
        raise ValueError(f"unknown precision {name!r}; use {', '.join(PRECISION_CHOICES)}")
    return name
