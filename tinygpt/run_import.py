"""``tinygpt import``: a finished run folder (``metrics.csv``, ``config.json``, ``best.pt`` when present)
or a bare metrics CSV, as the payload of the dashboard's ``POST /api/runs/import``; another trainer's TensorBoard
folder or log file (``tinygpt.foreign_logs``) as the payload of ``POST /api/runs/import-foreign``."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from .foreign_logs import is_tensorboard, read_foreign
from .records import read_metrics_csv
from .run_config import TrainConfig


class RunImportError(ValueError):
    """A folder or file that cannot be imported: one line naming what is missing."""


def read_config_arg(text: str) -> dict:
    """``--config``: a JSON file (a run folder's ``config.json``, or run options) or inline JSON options."""
    raw = text if text.lstrip().startswith("{") else Path(text).read_text(encoding="utf-8")
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise RunImportError(f"--config is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise RunImportError("--config must be a JSON object of run options")
    return data


def train_options(data: dict) -> dict:
    """The run options of a ``--config``: a run folder's ``config.json`` (its ``train`` part) or the options
    themselves, less the corpus (a path on the machine that wrote it)."""
    options = data.get("train", data)
    if not isinstance(options, dict):
        raise RunImportError("--config must be a JSON object of run options")
    return {k: v for k, v in options.items() if k != "corpus"}


def config_parts(data: dict) -> tuple[TrainConfig, dict]:
    """The run options (checked by the library) and what ``config.json`` says was resolved."""
    options = data.get("train", data)
    resolved = data.get("resolved", {})
    config = TrainConfig.from_dict({"corpus": "", **train_options(data)})
    corpus = Path(options.get("corpus") or "holmes.txt")
    return config, {**resolved, "dataset": corpus.stem or "holmes"}


def import_payload(path: Path, *, config_arg: str | None = None, device_name: str | None = None,
                   name: str | None = None, tags: list[str] | None = None) -> tuple[dict, Path | None]:
    """The import request for ``path`` and the checkpoint to upload after it (None: none)."""
    if path.is_dir():
        metrics_path, config_path, best = path / "metrics.csv", path / "config.json", path / "best.pt"
        if not metrics_path.exists():
            raise RunImportError(f"{path} has no metrics.csv: not a run folder")
        if config_arg is None and not config_path.exists():
            raise RunImportError(f"{path} has no config.json: give its options with --config")
        data = read_config_arg(config_arg) if config_arg else json.loads(config_path.read_text())
    elif path.is_file():
        metrics_path, best = path, None
        if config_arg is None:
            raise RunImportError(f"{path} is a bare metrics CSV: give its run options with --config "
                               "(a JSON file or '{...}') and its device with --device-name")
        data = read_config_arg(config_arg)
    else:
        raise RunImportError(f"{path} does not exist")
    config, resolved = config_parts(data)
    try:
        rows = read_metrics_csv(metrics_path)
    except (KeyError, ValueError) as exc:
        raise RunImportError(f"{metrics_path} is not a tinygpt metrics CSV ({type(exc).__name__}: {exc})") from None
    if not rows:
        raise RunImportError(f"{metrics_path} has no rows")
    last = rows[-1].step
    finished = last >= config.steps
    payload = {
        "name": name or (path.name if path.is_dir() else path.stem),
        "tags": tags or [],
        "device": resolved.get("device") or config.device,
        "device_info": {"name": device_name} if device_name else {},
        "precision": resolved.get("precision") or config.precision,
        "params": resolved.get("params") or config.model_config().num_params,
        "config": {**{k: v for k, v in config.to_dict().items() if k not in ("corpus", "device")},
                   "dataset": resolved["dataset"],
                   # the target its trainer resolved (config.json of this version): the one it measured against
                   **({"target_val_loss": resolved["target_val_loss"] or 0} if "target_val_loss" in resolved else {})},
        "val_bytes_per_token": resolved.get("val_bytes_per_token"),
        "status": "succeeded" if finished else "cancelled",
        "error": None if finished else f"imported: its metrics end at step {last} of {config.steps}",
        "metrics": [asdict(m) for m in rows],
    }
    return payload, best if best is not None and best.exists() else None


def is_foreign(path: Path) -> bool:
    """Another trainer's files: a TensorBoard folder or event file, or a file that is not a metrics CSV."""
    if is_tensorboard(path):
        return True
    return path.is_file() and path.suffix.lower() != ".csv"


def foreign_payload(path: Path, *, config_arg: str | None = None, device: str | None = None,
                    device_name: str | None = None, name: str | None = None, tags: list[str] | None = None,
                    tokens_per_step: int | None = None, target: float | None = None) -> dict:
    """The ``POST /api/runs/import-foreign`` request for another trainer's TensorBoard folder or log file: every
    value it holds, by its own name (the dashboard maps the names onto its columns)."""
    log = read_foreign(path)
    params = read_config_arg(config_arg) if config_arg else {}
    origin = "tensorboard" if log.source == "tensorboard" else "log_file"
    return {
        "name": name or (path.name if path.is_dir() else path.stem), "tags": tags or [], "origin": origin,
        "source": log.source, "params": params, "device": device,
        "device_info": {"name": device_name} if device_name else {},
        "steps": log.total_steps, "tokens_per_step": tokens_per_step, "target_val_loss": target,
        "points": [{"name": p.name, "step": p.step, "value": p.value, "wall_time": p.wall_time} for p in log.points],
    }
