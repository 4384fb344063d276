"""Run-scoped tokens: what a Slurm job reports with instead of the dashboard's API token.

A compute node never holds the admin token. Each Slurm run gets its own token when its job is submitted
(``tgr-RUN-SECRET``); the database keeps its SHA-256 only. It allows exactly two requests, for its own
run: ``POST /api/runs/RUN/report`` and ``PUT /api/runs/RUN/checkpoint``, and only while the run has not
finished (it expires with the run). Anything else is refused (``app/security.py``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from sqlmodel import Session

from ..models import Run, RunStatus

RUN_TOKEN = re.compile(r"tgr-(\d{1,10})-([A-Za-z0-9_-]{32,64})")
#: The requests a run's token may make, each for its own run only.
RUN_TOKEN_REQUESTS = {("POST", re.compile(r"/api/runs/(\d+)/report")),
                      ("PUT", re.compile(r"/api/runs/(\d+)/checkpoint"))}


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_run_token(run: Run) -> str:
    """A fresh token for ``run`` (an earlier one stops working); the run keeps its hash (uncommitted)."""
    token = f"tgr-{run.id}-{secrets.token_urlsafe(32)}"
    run.job_token_hash = token_hash(token)
    return token


def token_run_id(presented: str) -> int | None:
    """The run a presented token names, if it has a run token's form (not yet checked).

    >>> token_run_id("tgr-12-" + "a" * 43), token_run_id("an-admin-token")
    (12, None)
    """
    match = RUN_TOKEN.fullmatch(presented)
    return int(match.group(1)) if match else None


def request_run_id(method: str, path: str) -> int | None:
    """The run a request reports for, when it is one a run token may make.

    >>> request_run_id("POST", "/api/runs/7/report"), request_run_id("GET", "/api/runs/7")
    (7, None)
    """
    for allowed, pattern in RUN_TOKEN_REQUESTS:
        match = pattern.fullmatch(path)
        if match and method == allowed:
            return int(match.group(1))
    return None


def run_token_valid(session: Session, *, presented: str, run_id: int) -> bool:
    """The token is ``run_id``'s current one (compared in constant time) and the run has not finished."""
    run = session.get(Run, run_id)
    if run is None or run.job_token_hash is None or RunStatus(run.status).finished:
        return False
    return hmac.compare_digest(token_hash(presented), run.job_token_hash)
