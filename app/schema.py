"""The database's schema: its revision, upgrades that lose nothing, backups before them, and restores.

Alembic's migrations (``app/migrations/versions/``) bring a database to this version's head revision. The app,
the worker and the Slurm executor apply them at start-up (:func:`app.db.init_db`) unless
``TINYGPT_AUTO_MIGRATE`` is false; ``tinygpt db upgrade`` applies them by hand. Every upgrade of a database that
holds something:

- is preceded by a backup of a SQLite database into ``$TINYGPT_HOME/backups/`` (SQLite's online backup API; the
  last ``TINYGPT_BACKUPS_KEPT`` are kept), named in the log; PostgreSQL's is ``pg_dump``, the operator's;
- runs in one transaction: on SQLite with foreign keys off (a table that Alembic's batch mode rebuilds is
  dropped and replaced, and with foreign keys on, dropping ``runs`` deletes every row that references it), on
  PostgreSQL as it is (its ``ALTER TABLE`` rebuilds nothing);
- is rolled back unless, at its end, no table has fewer rows than before and ``PRAGMA foreign_key_check``
  finds no row that it did not find before (:class:`UpgradeRefused`).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool

from .settings import Settings

log = logging.getLogger("tinygpt.schema")

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
FIRST_REVISION = "0001"  # the schema that create_all() made before migrations existed
BACKUP_GLOB = "tinygpt-*.db"  # the backups this module writes, and the only files it prunes
LIVE_WORKER_SEC = 30  # a worker whose heartbeat is this recent is taken to be running (restore refuses)


class SchemaError(RuntimeError):
    """A database this version cannot use or change as asked: one line naming what to do."""


class SchemaOutOfDate(SchemaError):
    """The database is at an older revision and ``TINYGPT_AUTO_MIGRATE`` is false."""


class UpgradeRefused(SchemaError):
    """An upgrade that would have lost rows or broken references: rolled back, nothing changed."""


@dataclass(frozen=True)
class SchemaState:
    """Where a database stands: its revision (None: empty, or made before migrations) and this version's head."""

    current: str | None
    head: str
    has_rows: bool  # it holds tables of ours: an upgrade backs it up first

    @property
    def up_to_date(self) -> bool:
        return self.current == self.head


def alembic_config(connection: Connection | None = None):  # noqa: ANN201  (alembic's Config, imported late)
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def known_revisions() -> list[str]:
    """Every revision this version knows, oldest first (0001 ... head)."""
    from alembic.script import ScriptDirectory

    return [s.revision for s in reversed(list(ScriptDirectory.from_config(alembic_config()).walk_revisions()))]


def head_revision() -> str:
    return known_revisions()[-1]


def schema_state(connection: Connection) -> SchemaState:
    tables = set(inspect(connection).get_table_names())
    current = None
    if "alembic_version" in tables:
        current = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
    elif "runs" in tables:  # made by the version before migrations: its schema is the first revision's
        current = FIRST_REVISION
    return SchemaState(current=current, head=head_revision(), has_rows=bool(tables - {"alembic_version"}))


def database_state(engine: Engine) -> SchemaState:
    with engine.connect() as connection:
        return schema_state(connection)


@dataclass(frozen=True)
class Upgraded:
    """What an upgrade did: the state it found the database in, and the backup written first (None: none)."""

    found: SchemaState
    backup: Path | None = None


def upgrade(engine: Engine, settings: Settings, *, explicit: bool = False) -> Upgraded:
    """Bring the database to the head revision (the caller holds the migration lock). Unless ``explicit`` (``tinygpt db upgrade``), a database behind the head with
    ``TINYGPT_AUTO_MIGRATE`` false raises :class:`SchemaOutOfDate`."""
    state = database_state(engine)
    if state.current is not None and state.current not in known_revisions():
        raise SchemaError(f"the database is at revision {state.current}, which this version ({state.head}) does not "
                          "know: it was upgraded by a newer version; install that one, or restore a backup "
                          "(tinygpt db restore)")
    if state.up_to_date:
        return Upgraded(state)
    if state.has_rows and not explicit and not settings.auto_migrate:
        raise SchemaOutOfDate(f"the database is at revision {state.current} and this version needs {state.head}: "
                              "run `tinygpt db upgrade` (TINYGPT_AUTO_MIGRATE is false)")
    backup = None
    if state.has_rows and engine.dialect.name == "sqlite":
        backup = backup_database(settings, revision=state.current)
        log.warning("upgrading the database from revision %s to %s; a backup of it: %s", state.current, state.head,
                    backup)
    elif state.has_rows:
        log.warning("upgrading the database from revision %s to %s; on PostgreSQL the backup is yours (pg_dump, "
                    "README: Upgrading)", state.current, state.head)
    migrate(engine, state)
    return Upgraded(state, backup)


def migrate(engine: Engine, state: SchemaState) -> None:
    """Alembic's ``upgrade head`` in one transaction that is rolled back if a table lost rows or a reference broke."""
    from alembic import command

    with migration_connection(engine) as connection:
        before = row_counts(connection)
        broken_before = broken_references(connection)
        config = alembic_config(connection)
        if state.current == FIRST_REVISION and "alembic_version" not in set(inspect(connection).get_table_names()):
            command.stamp(config, FIRST_REVISION)
        command.upgrade(config, "head")
        check_nothing_lost(before, row_counts(connection), broken_before, broken_references(connection))


def check_nothing_lost(before: dict[str, int], after: dict[str, int], broken_before: set[tuple],
                       broken_after: set[tuple]) -> None:
    """UpgradeRefused if a table has fewer rows than before, or a row references one that is gone.

    >>> check_nothing_lost({"runs": 2, "metrics": 8}, {"runs": 2, "metrics": 0, "sweeps": 0}, set(), set())
    Traceback (most recent call last):
    ...
    app.schema.UpgradeRefused: the upgrade would have lost rows (metrics: 8 -> 0); it was rolled back and the database is as it was
    """
    lost = [f"{table}: {count} -> {after.get(table, 0)}" for table, count in before.items()
            if after.get(table, 0) < count]
    if lost:
        raise UpgradeRefused(f"the upgrade would have lost rows ({', '.join(lost)}); it was rolled back and the "
                             "database is as it was")
    broken = sorted(broken_after - broken_before)
    if broken:
        shown = ", ".join(f"{table} row {rowid} -> {parent}" for table, rowid, parent in broken[:5])
        raise UpgradeRefused(f"the upgrade would have left {len(broken)} rows referencing rows that do not exist "
                             f"({shown}); it was rolled back and the database is as it was")


def row_counts(connection: Connection) -> dict[str, int]:
    tables = sorted(set(inspect(connection).get_table_names()) - {"alembic_version"})
    return {t: connection.execute(text(f'SELECT count(*) FROM "{t}"')).scalar_one() for t in tables}


def broken_references(connection: Connection) -> set[tuple]:
    """SQLite's ``PRAGMA foreign_key_check``: (table, rowid, parent table) of every row whose reference is
    broken (PostgreSQL checks every reference as it is written: none)."""
    if connection.dialect.name != "sqlite":
        return set()
    return {(table, rowid, parent) for table, rowid, parent, _ in connection.exec_driver_sql("PRAGMA foreign_key_check")}


@contextmanager
def migration_connection(engine: Engine) -> Iterator[Connection]:
    """A connection in one transaction for the migrations. On SQLite a connection of its own: foreign keys off
    (SQLite ignores the pragma inside a transaction, so it is set first) and the driver's own transaction
    handling off, so that the schema changes are inside the transaction too (SQLAlchemy's pysqlite recipe)."""
    if engine.dialect.name != "sqlite":
        with engine.begin() as connection:
            yield connection
        return
    own = create_engine(engine.url, poolclass=NullPool, connect_args={"timeout": 30})

    @event.listens_for(own, "connect")
    def _no_foreign_keys(dbapi_conn, _record) -> None:  # noqa: ANN001
        dbapi_conn.isolation_level = None
        dbapi_conn.execute("PRAGMA foreign_keys=OFF")

    @event.listens_for(own, "begin")
    def _begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    try:
        with own.begin() as connection:
            yield connection
    finally:
        own.dispose()


# -- backups ---------------------------------------------------------------------------------------------
def sqlite_path(settings: Settings) -> Path:
    """The SQLite database's file (SchemaError on PostgreSQL: its backups are pg_dump's)."""
    url = settings.db_url
    if not url.startswith("sqlite"):
        raise SchemaError("the database is PostgreSQL: back it up with pg_dump and restore it with pg_restore "
                          "(README: Upgrading)")
    return Path(url.split("///", 1)[-1])


def backups_dir(settings: Settings) -> Path:
    return settings.home_dir / "backups"


def backup_database(settings: Settings, *, revision: str | None = None) -> Path:
    """A consistent copy of the SQLite database, taken while others may write to it (SQLite's online backup
    API), as ``backups/tinygpt-<UTC time>-<revision>.db``; then all but the newest ``TINYGPT_BACKUPS_KEPT``
    backups are removed."""
    source = sqlite_path(settings)
    if not source.is_file():
        raise SchemaError(f"there is no database at {source} to back up")
    folder = backups_dir(settings)
    folder.mkdir(parents=True, exist_ok=True)
    revision = revision or file_revision(source) or "none"
    target = folder / f"tinygpt-{backup_stamp()}-{revision}.db"
    while target.exists():  # two backups within a millisecond
        target = folder / f"tinygpt-{backup_stamp()}-{revision}.db"
    copy_database(source, target)
    prune_backups(folder, keep=settings.backups_kept)
    return target


def backup_stamp() -> str:
    """The time in a backup's name: UTC to the millisecond, so that names sort by time."""
    now = datetime.now(UTC)
    return f"{now:%Y%m%dT%H%M%S}.{now.microsecond // 1000:03d}Z"


def copy_database(source: Path, target: Path) -> None:
    """``source`` into ``target`` (made or overwritten) with SQLite's online backup API."""
    with closing(sqlite3.connect(f"file:{source}?mode=ro", uri=True)) as src, closing(sqlite3.connect(target)) as dst:
        src.backup(dst)


def prune_backups(folder: Path, *, keep: int) -> list[Path]:
    """Remove all but the newest ``keep`` backups (their names sort by time); returns the removed."""
    backups = sorted(folder.glob(BACKUP_GLOB))
    removed = backups[:-keep] if keep else backups
    for path in removed:
        path.unlink()
        log.info("removed the old backup %s (TINYGPT_BACKUPS_KEPT=%d)", path, keep)
    return removed


def file_revision(path: Path) -> str | None:
    """The schema revision of a SQLite file; SchemaError if it is not a database of ours.

    A database made before migrations (a ``runs`` table, no ``alembic_version``) is at the first revision."""
    tables = sqlite_tables(path)
    if "alembic_version" in tables:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            return conn.execute("SELECT version_num FROM alembic_version").fetchone()[0]
    if "runs" not in tables:
        raise SchemaError(f"{path} is not a TinyGPT Dashboard database (it has no runs table)")
    return FIRST_REVISION


def sqlite_tables(path: Path) -> set[str]:
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            return {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as exc:
        raise SchemaError(f"{path} is not a SQLite database ({exc})") from None


def restore_database(settings: Settings, source: Path) -> Path | None:
    """Replace the SQLite database with the backup ``source``, after backing the current one up (returned;
    None when there was none). Refused while a worker of this database is running, and for a backup newer
    than this version."""
    target = sqlite_path(settings)
    if not source.is_file():
        raise SchemaError(f"{source}: no such file")
    revision = file_revision(source)
    if revision not in known_revisions():
        raise SchemaError(f"{source} is at revision {revision}, which this version ({head_revision()}) does not know")
    previous = None
    if target.is_file():
        check_no_live_worker(target)
        previous = backup_database(settings)
    target.parent.mkdir(parents=True, exist_ok=True)
    copy_database(source, target)
    return previous


def check_no_live_worker(path: Path) -> None:
    if "workers" not in sqlite_tables(path):
        return
    since = datetime.now(UTC) - timedelta(seconds=LIVE_WORKER_SEC)
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        rows = conn.execute("SELECT name, heartbeat_at FROM workers WHERE stopped_at IS NULL").fetchall()
    live = [name for name, beat in rows if datetime.fromisoformat(beat).replace(tzinfo=UTC) > since]  # stored in UTC
    if live:
        raise SchemaError(f"the dashboard is running (worker {live[0]}): stop it before restoring a backup")
