"""``tinygpt info``: presets, recipes, parameter breakdowns, the untrained-loss check, devices."""

from __future__ import annotations

import math

import torch

from .device import available_devices, cpu_summary
from .model import GPT
from .presets import ARCHS, list_presets, model_config
from .recipes import list_recipes

UNTRAINED_TOLERANCE = 0.1
NAME_WIDTH = 10  # the lists' first column: the longest name (fast-best) and a space


def print_entry(name: str, *lines: str) -> None:
    """One entry of a list: ``name`` in the first column beside its first line, the others under that line.

    >>> print_entry("fast-best", "a recipe", "its options")
      fast-best  a recipe
                 its options
    """
    for i, line in enumerate(lines):
        print(f"  {name if i == 0 else '':<{NAME_WIDTH}} {line}")


@torch.no_grad()
def untrained_loss(model: GPT, batch_size: int = 8, seed: int = 0) -> float:
    """Loss of the freshly initialised model on random tokens (expected near ln(vocab))."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(model.config.vocab_size, (batch_size, model.config.context + 1), generator=g)
    model.eval()
    _, loss = model(x[:, :-1], x[:, 1:])
    return float(loss)


def print_preset_info(preset: str, arch: str | None) -> int:
    """Print the breakdown; return 0 when the untrained loss is within tolerance of ln(vocab), else 1."""
    config = model_config(preset, arch)
    torch.manual_seed(1337)
    model = GPT(config)
    parts = model.param_breakdown()
    print(f"preset {preset} ({arch or 'default'} architecture): {config}")
    print(f"  token embedding (tied with output) {parts['embedding']:>12,}")
    if parts["position_embedding"]:
        print(f"  position embedding                 {parts['position_embedding']:>12,}")
    print(f"  one block                          {parts['block']:>12,}")
    print(f"    attention                        {parts['block_attention']:>12,}")
    print(f"    MLP                              {parts['block_mlp']:>12,}")
    print(f"    norms                            {parts['block_norms']:>12,}")
    print(f"  {config.n_layers} blocks                           {parts['blocks']:>12,}")
    print(f"  final norm                         {parts['final_norm']:>12,}")
    if parts["head"]:
        print(f"  output head (untied)               {parts['head']:>12,}")
    print(f"  total                              {parts['total']:>12,}")
    loss = untrained_loss(model)
    expected = math.log(config.vocab_size)
    ok = abs(loss - expected) <= UNTRAINED_TOLERANCE
    verdict = "ok" if ok else f"FAIL: more than {UNTRAINED_TOLERANCE} away"
    print(f"untrained loss {loss:.3f} (ln {config.vocab_size} = {expected:.3f}): {verdict}")
    return 0 if ok else 1


def print_presets() -> None:
    print("presets (parameters per architecture):")
    for p in list_presets():
        counts = ", ".join(f"{a} {p['params'][a]:,}" for a in ARCHS)
        print_entry(p["name"], p["description"], f"default {p['default_arch']}; {counts}")
    print("recipes (tinygpt train --recipe NAME; the options given win):")
    for r in list_recipes():
        options = ", ".join(f"{k} {v}" for k, v in r["options"].items()) or "the defaults"
        print_entry(r["name"], r["description"], options)
        for kind, variant in r["on_device"].items():
            changed = ", ".join(f"{k} {v}" for k, v in variant["options"].items())
            print_entry("", f"on {kind} (--device {kind}, or auto there): {changed}, the rest the defaults")


def print_devices() -> None:
    print("devices:")
    for d in available_devices():
        desc = d["description"]
        if not d["available"]:
            print_entry(d["device"], f"unavailable: {d['reason']}")
        elif desc is None:
            print_entry(d["device"], "available")
        elif desc["type"] == "cpu":
            print_entry(d["device"], f"{desc['name']}, {desc['threads']} threads, {desc['capability']}, torch {desc['torch']}",
                        f"CPU flags: {cpu_summary()}")
        else:
            print_entry(d["device"], f"{desc['name']}, {desc.get('memory_mib')} MiB, torch {desc['torch']}")
