"""Datasets: the built-in Holmes corpus and uploaded UTF-8 text files."""

from __future__ import annotations

import codecs
import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Protocol

from sqlmodel import Session, col, select
from starlette.concurrency import run_in_threadpool

from tinygpt.corpus import KNOWN_TARGETS, CorpusError, check_splits_fit

from ..errors import Invalid, NotFound, TooLarge
from ..models import Dataset
from ..settings import Settings

HOLMES = "holmes"
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # whole names only: fullmatch
CHUNK = 1 << 20


class AsyncReadable(Protocol):
    async def read(self, size: int = -1) -> bytes: ...


def dataset_path(session: Session, *, name: str, settings: Settings) -> Path:
    """Where a dataset's text is (the built-in Holmes path may not exist yet: the job downloads it)."""
    if name == HOLMES:
        return settings.holmes_corpus()
    ds = session.exec(select(Dataset).where(Dataset.name == name)).first()
    if ds is None:
        raise NotFound(f"no dataset named {name!r}")
    return Path(ds.path)


def check_dataset_exists(session: Session, *, name: str) -> None:
    if name == HOLMES:
        return
    if session.exec(select(Dataset.id).where(Dataset.name == name)).first() is None:
        raise Invalid(f"unknown dataset {name!r}; upload it first or use 'holmes'", field="dataset")


def dataset_target(session: Session, *, name: str, configured: float | None) -> float | None:
    """A run's target validation loss: the one it was given (0: none), else its dataset's (given at upload, or a
    known corpus': ``tinygpt.corpus.KNOWN_TARGETS``, by its sha256), else none."""
    if configured is not None:
        return configured or None
    dataset = session.exec(select(Dataset).where(Dataset.name == name)).first()
    return own_target(dataset) if dataset else None


def own_target(dataset: Dataset) -> float | None:
    return dataset.target_val_loss or KNOWN_TARGETS.get(dataset.sha256)


def file_facts(path: Path) -> tuple[str, int, int]:
    """sha256, bytes and characters of a text file."""
    data = path.read_bytes()
    return hashlib.sha256(data).hexdigest(), len(data), len(data.decode("utf-8", errors="replace"))


def ensure_builtin(session: Session, *, settings: Settings) -> Dataset:
    """The built-in Holmes row, its facts refreshed from the file when the file is there."""
    path = settings.holmes_corpus()
    ds = session.exec(select(Dataset).where(Dataset.name == HOLMES)).first()
    if ds is None:
        ds = Dataset(name=HOLMES, sha256="", bytes=0, chars=0, path=str(path), builtin=True)
    ds.path = str(path)
    if path.exists() and (ds.bytes != path.stat().st_size or not ds.sha256):
        ds.sha256, ds.bytes, ds.chars = file_facts(path)
    session.add(ds)
    session.commit()
    session.refresh(ds)
    return ds


def record_tokenizer(session: Session, *, name: str, vocab_size: int, fingerprint: str, tokens: int) -> None:
    """Note on the dataset row that a tokenizer of this size was trained for it (cached under
    $TINYGPT_HOME/cache) and how many tokens it makes of the dataset."""
    ds = session.exec(select(Dataset).where(Dataset.name == name)).first()
    if ds is None:
        return
    entry = {"vocab_size": vocab_size, "fingerprint": fingerprint, "tokens": tokens}
    if entry not in ds.tokenizers:  # a new list, so the JSON column is saved; an older entry of this tokenizer goes
        others = [t for t in ds.tokenizers if t.get("fingerprint") != fingerprint]
        ds.tokenizers = [*others, entry]
        session.add(ds)


def check_context_fits(session: Session, *, name: str, context: int, vocab_size: int) -> None:
    """Refuse, before a run is queued, a context longer than the dataset's validation split. The
    dataset's token count when a tokenizer of this size has encoded it, else its bytes (a byte-level
    BPE token is at least one byte): nothing that could fit is refused."""
    ds = session.exec(select(Dataset).where(Dataset.name == name)).first()
    if ds is None or not ds.bytes:
        return
    counted = [t["tokens"] for t in ds.tokenizers if t.get("vocab_size") == vocab_size and "tokens" in t]
    try:
        check_splits_fit(counted[0] if counted else ds.bytes, context)
    except CorpusError as exc:
        raise Invalid(f"context {context} is too long for dataset {name!r}: {exc}", field="context") from None


ALL_DATASETS = select(Dataset).order_by(col(Dataset.builtin).desc(), Dataset.name)  # built once (see services.runs)


def list_datasets(session: Session, *, settings: Settings) -> list[dict]:
    rows = session.exec(ALL_DATASETS).all()
    return [{**r.model_dump(mode="json", exclude={"id", "path"}), "available": Path(r.path).exists(),
             "target_val_loss": own_target(r)} for r in rows]


def dataset_exists(session: Session, name: str) -> bool:
    return session.exec(select(Dataset.id).where(Dataset.name == name)).first() is not None


async def upload_dataset(session: Session, *, name: str, source: AsyncReadable, settings: Settings,
                         target_val_loss: float | None = None) -> Dataset:
    """Stream an upload to disk, checking size and UTF-8 as it arrives; nothing is kept on failure.
    ``target_val_loss``: its runs' default target (time to target)."""
    if target_val_loss is not None and not 0 < target_val_loss <= 100:
        raise Invalid(f"target_val_loss must be in (0, 100], got {target_val_loss:g}", field="target_val_loss")
    if not NAME_RE.fullmatch(name) or name == HOLMES:
        raise Invalid(
            "dataset name must be 1-64 letters, digits, '.', '_' or '-', start with a letter or digit, and not be 'holmes'",
            field="name",
        )
    if await run_in_threadpool(dataset_exists, session, name):
        raise Invalid(f"a dataset named {name!r} already exists", field="name")
    limit = int(settings.max_upload_mb * 1_000_000)
    settings.datasets_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=settings.datasets_dir, prefix=".upload-")
    tmp = Path(tmp_name)
    digest, size, chars = hashlib.sha256(), 0, 0
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        with os.fdopen(fd, "wb") as out:
            while chunk := await source.read(CHUNK):
                size += len(chunk)
                if size > limit:
                    raise TooLarge(f"file is larger than the upload limit of {settings.max_upload_mb:g} MB", field="file")
                try:
                    text = decoder.decode(chunk)
                except UnicodeDecodeError as exc:
                    raise Invalid(f"file is not UTF-8 text (bad byte near offset {size - len(chunk) + exc.start})",
                                  field="file") from None
                if "\x00" in text:
                    raise Invalid("file is not text (it contains NUL bytes)", field="file")
                chars += len(text)
                digest.update(chunk)
                out.write(chunk)
            try:
                decoder.decode(b"", final=True)
            except UnicodeDecodeError:
                raise Invalid("file is not UTF-8 text (it ends inside a character)", field="file") from None
        if chars == 0 or not tmp.read_text(encoding="utf-8").strip():
            raise Invalid("file is empty", field="file")
        final = settings.datasets_dir / f"{name}.txt"
        tmp.replace(final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    ds = Dataset(name=name, sha256=digest.hexdigest(), bytes=size, chars=chars, path=str(final),
                 target_val_loss=target_val_loss)
    # the write may wait for SQLite's write lock: in a worker thread, never on the event loop
    return await run_in_threadpool(save_dataset, session, ds)


def save_dataset(session: Session, ds: Dataset) -> Dataset:
    session.add(ds)
    session.commit()
    session.refresh(ds)
    return ds
