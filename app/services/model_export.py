"""A run's model for other tools (``tinygpt.export``): made on request in a worker thread, one export at a time
per app, and kept in the run folder's ``exports/`` until its checkpoint changes, so a second download is a
file read. A transformers folder travels as a zip (its model card, weights and tokenizer under one folder)."""

from __future__ import annotations

import os
import tempfile
import threading
import zipfile
from pathlib import Path

from tinygpt.export import export
from tinygpt.export.families import ExportError, family_of
from tinygpt.run_config import stored_model_config

from ..errors import Invalid
from ..models.exports import ExportQuery

EXPORTS_FOLDER = "exports"
ONE_AT_A_TIME = threading.Lock()


def exported_file(*, run_id: int, checkpoint: Path, query: ExportQuery) -> Path:
    """The export of ``checkpoint`` as ``query`` asks, made now unless one newer than the checkpoint is kept.
    422 naming ``format`` when the architecture has no stock class."""
    target = checkpoint.parent / EXPORTS_FOLDER / query.file_name(run_id)
    if is_current(target, checkpoint):
        return target
    with ONE_AT_A_TIME:
        if is_current(target, checkpoint):  # made by the request we waited for
            return target
        target.parent.mkdir(exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".making-") as work:
            try:
                made = export(checkpoint, Path(work) / target.stem, format=query.format, dtype=query.dtype,
                              quant=query.quant)
            except ExportError as exc:
                raise Invalid(str(exc), field="format") from None
            if query.format == "hf":
                made = zipped(made, Path(work) / target.name)
            os.replace(made, target)  # whole or not at all: a download never sees a half-written file
    return target


def refusal(options: dict) -> str | None:
    """Why a run of these options cannot be exported (no stock class holds its architecture), or None."""
    try:
        family_of(stored_model_config(options))
    except ExportError as exc:
        return str(exc)
    except ValueError:  # options this version cannot read (an imported run's): the export itself will say
        return None
    return None


def is_current(target: Path, checkpoint: Path) -> bool:
    return target.is_file() and target.stat().st_mtime >= checkpoint.stat().st_mtime


def zipped(folder: Path, out: Path) -> Path:
    """``folder`` as a zip holding one folder of its name (weights stored as they are, text compressed)."""
    with zipfile.ZipFile(out, "w") as archive:
        for file in sorted(folder.iterdir()):
            method = zipfile.ZIP_STORED if file.suffix == ".safetensors" else zipfile.ZIP_DEFLATED
            archive.write(file, f"{folder.name}/{file.name}", compress_type=method)
    return out
