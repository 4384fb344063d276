"""Other trainers' files uploaded from a browser (the import page, ``POST /api/runs/import-files``): TensorBoard
event files (one file, or a log folder's files with their subfolders) or one speedrun log, read by the same
library functions ``tinygpt import`` uses (``tinygpt.run_import.foreign_payload``) and kept as
``import_foreign`` keeps the CLI's. The files are copied to a temporary folder first, bounded in count and bytes
while they stream in, each name kept inside that folder; nothing of them stays once the run is made."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path, PurePosixPath

from pydantic import ValidationError
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from tinygpt.foreign_logs import EVENT_FILE, ForeignLogError
from tinygpt.run_import import foreign_payload

from ..errors import Invalid, TooLarge
from ..models import ForeignImport, Run
from ..settings import Settings
from .datasets import CHUNK, AsyncReadable
from .foreign_runs import import_foreign

MAX_FILES = 200  # a TensorBoard folder's event files (add_scalars writes one per name)


def relative_names(names: list[str]) -> list[PurePosixPath]:
    """Each upload's name as a path inside the temporary folder: a folder's files keep their subfolders (a
    browser names them ``folder/sub/file``), the folder picked itself dropped; a name that would leave is refused.

    >>> [str(p) for p in relative_names(["exp1/events.out.tfevents.1", "exp1/loss_val/events.out.tfevents.2"])]
    ['events.out.tfevents.1', 'loss_val/events.out.tfevents.2']
    >>> [str(p) for p in relative_names(["train.log"])]
    ['train.log']
    """
    paths = [PurePosixPath(name.replace("\\", "/")) for name in names]
    for path in paths:
        if not path.parts or path.is_absolute() or any(part in ("..", ".", "") for part in path.parts):
            raise Invalid(f"file name {str(path)!r} is not a plain file name or a path inside the folder picked",
                          field="files")
    tops = {p.parts[0] for p in paths}
    if len(tops) == 1 and all(len(p.parts) > 1 for p in paths):  # the files of one folder
        paths = [PurePosixPath(*p.parts[1:]) for p in paths]
    return paths


def check_kinds(paths: list[PurePosixPath]) -> None:
    if len(paths) > 1 and not all(EVENT_FILE.match(p.name) for p in paths):
        others = sorted(p.name for p in paths if not EVENT_FILE.match(p.name))
        raise Invalid(f"several files are read as one TensorBoard log folder: {', '.join(others[:5])} "
                      "is not an event file (events.out.tfevents.*); a log file comes alone", field="files")


def parse_config(text: str | None) -> dict:
    if not text or not text.strip():
        return {}
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise Invalid(f"config is not JSON: {exc}", field="config") from None
    if not isinstance(config, dict):
        raise Invalid("config must be a JSON object of its script's options", field="config")
    return config


async def save_uploads(folder: Path, files: list[tuple[str, AsyncReadable]], settings: Settings) -> Path:
    """The uploads written under ``folder``; what ``foreign_payload`` reads (the folder, or the one log file)."""
    if not files:
        raise Invalid("no file: choose a TensorBoard event file or folder, or a log file", field="files")
    if len(files) > MAX_FILES:
        raise Invalid(f"at most {MAX_FILES} files at once, got {len(files)}", field="files")
    paths = relative_names([name for name, _ in files])
    check_kinds(paths)
    limit, size = int(settings.max_upload_mb * 1_000_000), 0
    for relative, (_, source) in zip(paths, files, strict=True):
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as out:
            while chunk := await source.read(CHUNK):
                size += len(chunk)
                if size > limit:
                    raise TooLarge(f"the files are larger than the upload limit of {settings.max_upload_mb:g} MB "
                                   "(TINYGPT_MAX_UPLOAD_MB)", field="files")
                out.write(chunk)
    return folder if len(paths) > 1 or EVENT_FILE.match(paths[0].name) else folder / paths[0]


async def import_files(session: Session, *, files: list[tuple[str, AsyncReadable]], settings: Settings,
                       name: str | None = None, config: str | None = None, device: str | None = None,
                       tokens_per_step: int | None = None, target_val_loss: float | None = None) -> Run:
    """Another trainer's run from uploaded files, named by the form or by its file (folder); commits."""
    params = parse_config(config)
    with tempfile.TemporaryDirectory(prefix="tinygpt-import-") as tmp:
        path = await save_uploads(Path(tmp), files, settings)
        try:
            payload = await run_in_threadpool(foreign_payload, path, device=device or None, name=name or None,
                                              tokens_per_step=tokens_per_step, target=target_val_loss)
        except ForeignLogError as exc:
            raise Invalid(str(exc).replace(f"{tmp}/", "").replace(tmp, "the upload"), field="files") from None
        if not name:  # a folder's name, else the file's (the temporary folder's is no one's)
            first = files[0][0].replace("\\", "/")
            payload["name"] = first.split("/")[0] if path.is_dir() else Path(first).stem
    try:
        body = ForeignImport.model_validate({**payload, "params": params})
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"]) or "files"
        raise Invalid(f"{field}: {error['msg']}", field=field) from None
    return await run_in_threadpool(import_foreign, session, body=body, settings=settings)
