"""A run's files on disk: what they weigh, and removing them (only ever inside the runs folder)."""

from __future__ import annotations

import shutil
from pathlib import Path

from ..models import Run
from ..settings import Settings


def folder_bytes(folder: Path) -> int:
    """Bytes of the regular files directly in ``folder`` and below (0 when it does not exist)."""
    if not folder.is_dir():
        return 0
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def run_disk_bytes(run: Run) -> int:
    return folder_bytes(Path(run.out_dir)) if run.out_dir else 0


def remove_file(path: Path) -> None:
    path.unlink(missing_ok=True)


def remove_run_folder(run: Run, settings: Settings) -> None:
    """Delete a run's folder, if it is one of the runs folder's own (a database row never points elsewhere)."""
    if not run.out_dir:
        return
    folder = Path(run.out_dir).resolve()
    runs = settings.runs_dir.resolve()
    if folder.parent == runs and folder.is_dir():
        shutil.rmtree(folder)
