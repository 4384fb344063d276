"""Plain safetensors: our weights under our own names, with the model config, the tokenizer and the run's
options as metadata (:func:`tinygpt.checkpoint.safetensors_parts`), for people who load them into their own
code; ``tinygpt sample`` and the dashboard read it back as a checkpoint."""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import save_file

from ..checkpoint import safetensors_parts
from .source import ExportSource, cast, read_source


def export_safetensors(source: str | Path | ExportSource, out: str | Path, *, dtype: str = "fp32") -> Path:
    source = source if isinstance(source, ExportSource) else read_source(source)
    weights, metadata = safetensors_parts(source.state)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file(cast(weights, dtype), str(out), metadata=metadata)
    return out
