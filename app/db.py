"""Database engine and sessions. SQLite gets WAL and a busy timeout so the app reads while the worker writes."""

from __future__ import annotations

import fcntl
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from sqlalchemy import event, text
from sqlalchemy.engine import Engine
from sqlmodel import Session, SQLModel, create_engine

from .settings import Settings, get_settings

if TYPE_CHECKING:
    from .schema import Upgraded

RowT = TypeVar("RowT", bound=SQLModel)

# Connections the pool may hand out at once: more than the request thread pool has threads
# (anyio's default: 40). Fewer, and under load every thread can end up waiting for a connection
# while the requests holding one wait for a thread to close their session: the app stalls until
# the pool's 30-second timeout (found by benchmarks/bench_load.py at 100 requests/s).
POOL_SIZE, POOL_OVERFLOW = 10, 50


@lru_cache
def engine_for(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30},
                               pool_size=POOL_SIZE, max_overflow=POOL_OVERFLOW)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record) -> None:  # noqa: ANN001
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=POOL_SIZE, max_overflow=POOL_OVERFLOW)


def get_engine(settings: Settings | None = None) -> Engine:
    return engine_for((settings or get_settings()).db_url)


PG_MIGRATION_LOCK = 727_001  # pg_advisory_lock key: one process migrates at a time


def init_db(settings: Settings | None = None) -> Engine:
    """The engine, its schema brought up to date first (:func:`upgrade_schema`)."""
    settings = settings or get_settings()
    upgrade_schema(settings)
    return get_engine(settings)


def upgrade_schema(settings: Settings, *, explicit: bool = False) -> Upgraded:
    """Bring the schema up to date (Alembic, ``upgrade head``) for SQLite and PostgreSQL alike, backing an
    existing SQLite database up first and losing no row (:mod:`app.schema`).

    Called at start-up by the app, the worker and the Slurm executor, which may start together (not by the
    jobs a worker starts: it migrated before it claimed their runs): migrations run under a lock (a lock file
    beside a SQLite database, an advisory lock on PostgreSQL). With ``TINYGPT_AUTO_MIGRATE`` false an older
    schema raises :class:`app.schema.SchemaOutOfDate` unless ``explicit`` (``tinygpt db upgrade``).
    """
    from . import (
        schema,  # Alembic's 0.24 s import: the processes that only use the database (every job) skip it
    )

    engine = get_engine(settings)
    logging.getLogger("alembic").setLevel(logging.WARNING)  # one line per process start is noise
    with migration_lock(engine):
        return schema.upgrade(engine, settings, explicit=explicit)


@contextmanager
def migration_lock(engine: Engine) -> Iterator[None]:
    if engine.dialect.name == "sqlite" and engine.url.database not in (None, "", ":memory:"):
        with open(f"{engine.url.database}.migrate-lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
    elif engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": PG_MIGRATION_LOCK})
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": PG_MIGRATION_LOCK})
    else:
        yield


@contextmanager
def session_scope(settings: Settings | None = None) -> Iterator[Session]:
    """A session that commits on success and rolls back on error (worker and services)."""
    with Session(get_engine(settings), expire_on_commit=False) as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


def saved_changes(session: Session, row: RowT, changes: SQLModel) -> RowT:
    """``row`` with the fields an update body gives (the ones set and not None), committed and read back."""
    for key, value in changes.model_dump(exclude_unset=True, exclude_none=True).items():
        setattr(row, key, value)
    session.add(row)
    session.commit()
    session.refresh(row)
    return row
