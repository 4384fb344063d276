"""The static files, served so that a browser keeps them: a page opened after another one downloads nothing.

The vendored libraries' folder names carry their versions (``static/vendor/uplot-1.6.32/``), and the pages ask
for our own CSS and JavaScript with the static folder's version (``?v={{ asset_version }}``, a hash of its files'
names, sizes and times): both may be kept for a year. Anything else is revalidated (``ETag``) on each use.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

STATIC = Path(__file__).resolve().parent.parent / "static"
KEEP = "public, max-age=31536000, immutable"


def asset_version(folder: Path = STATIC) -> str:
    """Changes whenever a file under ``folder`` does (its name, size or modification time)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        stat = path.stat()
        digest.update(f"{path.relative_to(folder)}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:12]


class CachedStaticFiles(StaticFiles):
    def file_response(self, full_path: str | os.PathLike[str], stat_result: os.stat_result, scope: Scope,
                      status_code: int = 200) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        versioned = "/vendor/" in scope["path"] or b"v=" in scope.get("query_string", b"")
        response.headers["Cache-Control"] = KEEP if versioned else "no-cache"
        return response
