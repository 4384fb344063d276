"""Atomic writes (tinygpt/files.py): what the shared caches (tokenizers, encoded corpora) are written with."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tinygpt.files import write_atomically


def test_two_writers_of_one_file_at_once_both_succeed(tmp_path: Path) -> None:
    """Two runs that start together fill one cache: each writes its own temporary file, both renames succeed."""
    both_written = threading.Barrier(2)
    errors: list[BaseException] = []

    def writer(text: str) -> None:
        def fill(tmp: Path) -> None:
            tmp.write_text(text)
            both_written.wait(timeout=10)  # neither renames before both temporary files exist

        try:
            write_atomically(tmp_path / "cache.json", fill)
        except BaseException as exc:  # noqa: BLE001 (reported by the assertion below)
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(text,)) for text in ("one", "two")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert (tmp_path / "cache.json").read_text() in {"one", "two"}
    assert [p.name for p in tmp_path.iterdir()] == ["cache.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens.pt"
    path.write_text("old")

    def fail(tmp: Path) -> None:
        tmp.write_text("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        write_atomically(path, fail)
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["tokens.pt"]


def test_the_file_gets_the_mode_a_plain_write_would(tmp_path: Path) -> None:
    """A cache another user of the machine reads (the dashboard's and the worker's) keeps the umask's mode."""
    plain = tmp_path / "plain.json"
    plain.write_text("x")
    write_atomically(tmp_path / "cache.json", lambda tmp: tmp.write_text("x"))
    assert (tmp_path / "cache.json").stat().st_mode == plain.stat().st_mode
