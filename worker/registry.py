"""Who is working: each worker registers under a name no other live worker holds, and a run is taken
from its worker only when that worker is provably gone.

A worker's default name is ``HOST:PID``, unique on its own. A name given with ``--name`` is refused
while another worker holds it and is alive: on this host, its process still runs; on another host,
its heartbeat is fresh. A worker that stops marks itself stopped; one that died leaves its record,
and the next worker that looks finds it dead (its pid gone on this host) and recovers its runs.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from pathlib import Path

from sqlalchemy import delete
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from app.models import WorkerRecord, utcnow


class WorkerNameInUse(RuntimeError):
    """Another live worker holds the name."""


def this_host() -> str:
    return socket.gethostname()


def default_name() -> str:
    return f"{this_host()}:{os.getpid()}"


def process_alive(pid: int) -> bool:
    """Whether a process of this host runs ``pid`` (a zombie, dead but not yet waited for, does not count)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc (macOS): the signal said it exists
    return state != "Z"


def is_gone(record: WorkerRecord, *, host: str, me: str | None = None) -> bool:
    """Provably gone: it said it stopped, or it ran on this host and its process is dead (or is this very
    process under another name: a container restarted, its pids starting over). ``me``: the caller's
    own name, never gone."""
    if record.stopped_at is not None:
        return True
    if record.name == me or record.host != host:
        return False
    return record.pid == os.getpid() or not process_alive(record.pid)


def is_live(record: WorkerRecord, *, host: str, stale_after_sec: float) -> bool:
    """Holds its name: not gone, and (on another host, where its pid says nothing) heard from lately."""
    if is_gone(record, host=host):
        return False
    return record.host == host or record.heartbeat_at >= utcnow() - timedelta(seconds=stale_after_sec)


def register(session: Session, *, name: str, devices: list[str], stale_after_sec: float) -> WorkerRecord:
    """Take ``name`` for this process, or raise :class:`WorkerNameInUse` naming the live holder."""
    host, now = this_host(), utcnow()
    forget_stopped(session)
    record = session.get(WorkerRecord, name, with_for_update=True)
    if record is not None and is_live(record, host=host, stale_after_sec=stale_after_sec):
        session.rollback()
        raise WorkerNameInUse(f"worker name {name!r} is in use by a live worker (pid {record.pid} on {record.host}); "
                              "stop it first, or give this one another --name")
    record = record or WorkerRecord(name=name, host=host, pid=os.getpid())
    record.host, record.pid, record.devices = host, os.getpid(), devices
    record.started_at = record.heartbeat_at = now
    record.stopped_at = None
    session.add(record)
    try:
        session.commit()
    except IntegrityError:  # another worker inserted the same name a moment ago
        session.rollback()
        raise WorkerNameInUse(f"worker name {name!r} was just taken by another worker; give this one another --name") \
            from None
    return record


def beat(session: Session, *, name: str) -> None:
    stamp_own_record(session, name=name, field="heartbeat_at")


def unregister(session: Session, *, name: str) -> None:
    stamp_own_record(session, name=name, field="stopped_at")


def stamp_own_record(session: Session, *, name: str, field: str) -> None:
    """Set ``field`` to now on this process's own record (never on a record another process took over)."""
    record = session.get(WorkerRecord, name)
    if record is not None and record.pid == os.getpid():
        setattr(record, field, utcnow())
        session.add(record)
        session.commit()


def gone_owners(session: Session, names: set[str], *, me: str) -> set[str]:
    """Which of these workers are registered and provably gone (their running runs are orphans)."""
    host = this_host()
    records = session.exec(select(WorkerRecord).where(col(WorkerRecord.name).in_(names))).all()
    return {r.name for r in records if is_gone(r, host=host, me=me)}


def forget_stopped(session: Session, *, older_than_days: float = 7) -> None:
    """Drop the records of workers that stopped long ago (each start under a default name adds one)."""
    cutoff = utcnow() - timedelta(days=older_than_days)
    session.exec(delete(WorkerRecord).where(col(WorkerRecord.stopped_at) < cutoff))
