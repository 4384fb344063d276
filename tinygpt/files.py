"""Writing a file so that no reader or other writer ever sees half of it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path


def write_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """``write(tmp)`` to a temporary file of this writer's own beside ``path``, then rename it to ``path``.

    Readers see the old file or the whole new one. Writers at the same time (two runs starting together fill
    one cache) each rename a whole file of their own: the last one wins, none fails. A write that raises leaves
    no temporary file behind.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> write_atomically(folder / "a" / "b.txt", lambda tmp: tmp.write_text("hello"))
    >>> (folder / "a" / "b.txt").read_text(), [p.name for p in (folder / "a").iterdir()]
    ('hello', ['b.txt'])
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")  # made by write(), so with the umask's mode
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
