"""Take the model home: a checkpoint as a Hugging Face ``transformers`` folder (:mod:`.hf`), a GGUF file for
llama.cpp (:mod:`.gguf_file`) or plain safetensors (:mod:`.safetensors_file`); :func:`export` picks the writer.

Each architecture maps onto a stock class (:mod:`.families`); a mix no stock class holds is refused before any
file is written. Exporting needs ``safetensors`` and ``gguf`` only; what reads the files back in the tests
(``transformers``, ``tokenizers``, llama.cpp) was written by nobody here (tests/test_export.py).

This module imports no torch: the command line's parser and the dashboard's API models read the choices here.
"""

from __future__ import annotations

from pathlib import Path

#: What ``tinygpt export --format`` and ``GET /api/runs/{id}/export?format=`` write.
FORMATS = ("hf", "gguf", "safetensors")
#: Number formats of the weights (1-D tensors of a GGUF file stay fp32), and GGUF's quantizations.
DTYPE_NAMES = ("fp32", "bf16", "fp16")
QUANTS = ("q8_0",)


def export(source: str | Path, out: str | Path, *, format: str, dtype: str = "fp32", quant: str | None = None) -> Path:
    """Write ``source`` (a checkpoint or run folder) as ``format`` to ``out``; ``quant`` is GGUF's alone.
    ExportError (a ValueError) names what cannot be exported, before anything is written."""
    from .families import ExportError

    if quant is not None and format != "gguf":
        raise ExportError(f"--quant {quant} applies to the gguf format only, not {format}")
    if format == "gguf":
        from .gguf_file import export_gguf

        return export_gguf(source, out, dtype=dtype, quant=quant)
    if format == "hf":
        from .hf import export_hf

        return export_hf(source, out, dtype=dtype)
    from .safetensors_file import export_safetensors

    return export_safetensors(source, out, dtype=dtype)
