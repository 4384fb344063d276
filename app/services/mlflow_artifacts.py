"""MLflow's artifact API (``/api/2.0/mlflow-artifacts/artifacts/<experiment>/<run>/artifacts/<path>``): a run's
artifacts are files in its own folder (``<run folder>/artifacts``), and nowhere else: a path is checked part by part
and resolved inside that folder before anything is read or written. Sizes are bounded per file (the request's
body: ``max_checkpoint_mb``, app/security.py) and per run (``MAX_ARTIFACTS`` files, ``max_artifacts_mb``). A
``.pt`` or ``.safetensors`` artifact that is a checkpoint of ours (the library's bounded checks, tensors only)
becomes the run's checkpoint, so the run can be sampled and exported like any other."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from sqlmodel import Session

from ..models import EventType, Run
from ..settings import Settings
from .events import record_event
from .files import folder_bytes, run_disk_bytes
from .mlflow_tracking import MlflowError, invalid, not_found, tracked_run

ARTIFACTS = "artifacts"
MAX_ARTIFACTS = 1000
MAX_DEPTH = 16
MODEL_SUFFIXES = (".pt", ".safetensors")


def artifact_parts(path: str) -> tuple[str, str, tuple[str, ...]]:
    """``<experiment>/<run>/artifacts[/<relative path>]`` split into its experiment, run and relative parts;
    INVALID_PARAMETER_VALUE for anything else (``..``, ``.``, empty parts, backslashes, too deep)."""
    parts = PurePosixPath(path.strip("/")).parts
    if len(parts) < 3 or parts[2] != ARTIFACTS:
        raise invalid(f"Invalid artifact path '{path}': expected <experiment id>/<run id>/artifacts/<path>")
    relative = parts[3:]
    if len(relative) > MAX_DEPTH:
        raise invalid(f"Invalid artifact path '{path}': at most {MAX_DEPTH} folders deep")
    for part in relative:
        if part in (".", "..") or "\\" in part or "\x00" in part or len(part) > 255:
            raise invalid(f"Invalid artifact path '{path}': '{part}' is not allowed in a path")
    return parts[0], parts[1], relative


def artifact_run(session: Session, path: str) -> tuple[Run, Path]:
    """The MLflow run a path names, and the path's place inside the run's artifacts folder (never outside it)."""
    experiment_id, run_id, relative = artifact_parts(path)
    run = tracked_run(session, run_id=run_id)
    if (run.group_id or "0") != experiment_id:
        raise not_found(f"Run '{run_id}' is not in experiment '{experiment_id}'")
    root = artifacts_root(run)
    target = root.joinpath(*relative).resolve() if relative else root
    if not target.is_relative_to(root):  # a link inside the folder cannot lead out of it either
        raise invalid(f"Invalid artifact path '{path}': it leaves the run's artifacts folder")
    return run, target


def artifacts_root(run: Run) -> Path:
    return (Path(run.out_dir or "") / ARTIFACTS).resolve()


def upload_target(session: Session, *, path: str, settings: Settings) -> Path:
    """Where an upload to ``path`` goes, checked before its body is read: a file path, within the run's bounds."""
    run, target = artifact_run(session, path)
    root = artifacts_root(run)
    if target == root or target.is_dir():
        raise invalid(f"Invalid artifact path '{path}': name a file to upload")
    files = [p for p in root.rglob("*") if p.is_file()] if root.is_dir() else []
    if target not in files and len(files) >= MAX_ARTIFACTS:
        raise MlflowError("RESOURCE_LIMIT_EXCEEDED", f"a run holds at most {MAX_ARTIFACTS} artifacts")
    if folder_bytes(root) >= settings.max_artifacts_mb * 1_000_000:
        raise MlflowError("RESOURCE_LIMIT_EXCEEDED",
                          f"the run's artifacts reached the limit of {settings.max_artifacts_mb:g} MB")
    target.parent.mkdir(parents=True, exist_ok=True)
    return target


def keep_upload(session: Session, *, path: str, upload: Path, settings: Settings) -> None:
    """Move a complete upload into place; a model file that is one of ours becomes the run's checkpoint."""
    from tinygpt.checkpoint import CheckpointError, verify_checkpoint  # torch: only for a model file

    run, target = artifact_run(session, path)
    if folder_bytes(artifacts_root(run)) + upload.stat().st_size > settings.max_artifacts_mb * 1_000_000:
        raise MlflowError("RESOURCE_LIMIT_EXCEEDED",
                          f"the run's artifacts would pass the limit of {settings.max_artifacts_mb:g} MB")
    os.replace(upload, target)
    name = "/".join(target.relative_to(artifacts_root(run)).parts)
    if target.suffix in MODEL_SUFFIXES:
        try:
            verify_checkpoint(target)
        except CheckpointError as exc:
            message = f"artifact {name} is kept as a file: not a checkpoint of this dashboard's ({exc})"
            record_event(session, run_id=run.id, type=EventType.log,
                         data={"message": message.replace(str(target), name)})
        else:
            run.checkpoint_path = str(target)
            record_event(session, run_id=run.id, type=EventType.log,
                         data={"message": f"artifact {name} is a checkpoint of ours: the run can be sampled"})
    run.disk_bytes = run_disk_bytes(run)
    session.add(run)
    session.commit()


def download_file(session: Session, *, path: str) -> Path:
    _, target = artifact_run(session, path)
    if not target.is_file():
        raise not_found(f"Artifact '{path}' not found")
    return target


def list_artifacts(session: Session, *, path: str) -> list[dict]:
    """The files and folders directly in ``path`` (MLflow's ``ListArtifacts``), names relative to it, sorted;
    none for a file (as MLflow's own server answers: the client then downloads it as a file)."""
    _, target = artifact_run(session, path)
    if not target.is_dir():
        return []
    return [{"path": p.name, "is_dir": True} if p.is_dir() else
            {"path": p.name, "is_dir": False, "file_size": p.stat().st_size}
            for p in sorted(target.iterdir()) if not p.is_symlink()]
