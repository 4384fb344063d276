"""Where the library's commands keep things, and the dashboard they report to: the ``TINYGPT_*`` variables
the library reads (standard library only: the dashboard's settings import it before torch)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_HOME = Path("~/.tinygpt")  # the dashboard's settings take their default from here


@dataclass(frozen=True)
class Paths:
    """Where the commands keep things, and the dashboard they report to.

    ``home`` holds ``cache/`` and ``datasets/``; ``holmes_override``, when set, is the Holmes corpus to use
    instead of a download; ``report_to`` and ``api_token``: the dashboard that ``train``, ``sync`` and
    ``import`` report to, and its token (the flags ``--report-to``/``--url`` and ``--token`` win). The
    installed ``tinygpt`` command builds it from the dashboard's one settings object (``app/cli.py``); the
    library used alone (``python -m tinygpt``) reads the same ``TINYGPT_*`` variables here
    (:meth:`from_environment`), and nowhere else.
    """

    home: Path
    holmes_override: Path | None = None
    report_to: str | None = None
    api_token: str | None = None

    @classmethod
    def from_environment(cls) -> Paths:
        holmes = os.environ.get("TINYGPT_HOLMES_PATH")
        return cls(home=Path(os.environ.get("TINYGPT_HOME") or DEFAULT_HOME).expanduser(),
                   holmes_override=Path(holmes).expanduser() if holmes else None,
                   report_to=os.environ.get("TINYGPT_REPORT_TO") or None,
                   api_token=os.environ.get("TINYGPT_API_TOKEN") or None)

    @property
    def cache_dir(self) -> Path:
        return self.home / "cache"

    def holmes_corpus(self) -> Path:
        return self.holmes_override or self.home / "datasets" / "holmes.txt"
