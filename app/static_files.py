"""The static files, served so that a browser keeps them: a page opened after another one downloads nothing.

The vendored libraries' folder names carry their versions (``static/vendor/uplot-1.6.32/``), and the pages ask
for our own CSS and JavaScript with the static folder's version (``?v={{ asset_version }}``, a hash of its files'
names, sizes and times): both may be kept for a year. Anything else is revalidated (``ETag``) on each use.
"""

from __future__ import annotations

import hashlib
import os
from importlib import resources
from pathlib import Path

from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

#: The static folder: the repository's top-level static/, installed as the package app.static
STATIC = Path(str(resources.files("app.static")))
KEEP = "public, max-age=31536000, immutable"


#: What makes the folder a package (pyproject.toml), not an asset: never served, not part of the version.
NOT_ASSETS = frozenset({"__init__.py", "__pycache__"})


def is_asset(relative: str) -> bool:
    """Whether a path under the static folder is one of its assets.

    >>> is_asset("js/run.js"), is_asset("__init__.py"), is_asset("__pycache__/__init__.cpython-311.pyc")
    (True, False, False)
    """
    return not NOT_ASSETS.intersection(Path(relative).parts)


def asset_version(folder: Path = STATIC) -> str:
    """Changes whenever a file under ``folder`` does (its name, size or modification time)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and is_asset(str(p.relative_to(folder)))):
        stat = path.stat()
        digest.update(f"{path.relative_to(folder)}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:12]


class CachedStaticFiles(StaticFiles):
    async def get_response(self, path: str, scope: Scope) -> Response:
        if not is_asset(path):
            raise HTTPException(status_code=404)
        return await super().get_response(path, scope)

    def file_response(self, full_path: str | os.PathLike[str], stat_result: os.stat_result, scope: Scope,
                      status_code: int = 200) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        versioned = "/vendor/" in scope["path"] or b"v=" in scope.get("query_string", b"")
        response.headers["Cache-Control"] = KEEP if versioned else "no-cache"
        return response
