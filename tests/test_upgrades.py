"""Upgrades lose nothing: a database at every earlier schema revision, with rows in every table, upgraded to this
version's head on SQLite and PostgreSQL keeps every row and every value; the runs still to train keep their model.

Each revision's database is made by the test from that revision's own migrations (``alembic upgrade REV``), and
its rows are generated from the tables as they are at that revision: no fixture files.
"""

from __future__ import annotations

import importlib
import itertools
import json
import sqlite3
from datetime import UTC, datetime, timedelta

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    Integer,
    MetaData,
    String,
    Text,
    insert,
    inspect,
    select,
    text,
)
from sqlalchemy.engine import Connection
from sqlmodel import SQLModel

from app import (
    models,  # noqa: F401  (registers the tables)
    schema,
)
from app.db import engine_for, init_db
from app.schema import SchemaError, SchemaOutOfDate, UpgradeRefused, alembic_config, known_revisions
from app.settings import Settings
from tinygpt.presets import ARCHS, PRESETS
from tinygpt.run_config import TrainConfig

from .service_helpers import tinygpt_here

REVISIONS = known_revisions()
OLDER = REVISIONS[:-1]
#: Runs of each kind, status and origin (the columns a revision does not have yet are left out).
RUN_VARIANTS = [  # the first three: one submission's seeds (one group, as add_runs named them before 0012)
    {"kind": "train", "status": "queued", "origin": "dashboard", "submitted": True},
    {"kind": "train", "status": "running", "origin": "dashboard", "submitted": True},
    {"kind": "train", "status": "crashed", "origin": "dashboard", "submitted": True},
    {"kind": "train", "status": "succeeded", "origin": "dashboard"},
    {"kind": "train", "status": "failed", "origin": "dashboard"},
    {"kind": "train", "status": "pruned", "origin": "dashboard"},
    {"kind": "benchmark", "status": "succeeded", "origin": "dashboard"},
    {"kind": "train", "status": "running", "origin": "reported"},
    {"kind": "train", "status": "succeeded", "origin": "imported"},
]
#: A run's options as revisions before 0011 stored them: sizes and rules left to the preset.
OPEN_CONFIG = {"preset": "tiny", "arch": None, "steps": 30, "eval_every": 10, "batch_size": 4, "d_model": None,
               "n_layers": None, "vocab_size": None, "warmup": None, "eval_batches": None, "dataset": "holmes"}
UNFINISHED = {"queued", "running", "crashed"}
SUBMITTED_GROUP = "0123456789ab"  # a submission's group id, as add_runs makes them


@pytest.fixture(params=["sqlite", "postgresql"])
def settings(request, tmp_path) -> Settings:
    if request.param == "sqlite":
        return Settings(home=tmp_path)
    return Settings(home=tmp_path, database_url=request.getfixturevalue("postgres").create_database())


def migrate_to(settings: Settings, revision: str) -> None:
    """The database at ``revision``, made by that revision's own migrations."""
    with engine_for(settings.db_url).begin() as connection:
        command.upgrade(alembic_config(connection), revision)


def value_for(table: str, column, n: int) -> object:  # noqa: ANN001
    """A value of ``column``'s type, different for every row ``n`` (unique columns stay unique)."""
    kind = column.type
    if isinstance(kind, Boolean):
        return n % 2 == 0
    if isinstance(kind, Integer):
        return 1000 + n
    if isinstance(kind, Float):
        return 0.25 + n
    if isinstance(kind, DateTime):
        return datetime(2026, 11, 1, tzinfo=UTC) + timedelta(minutes=n)
    if isinstance(kind, JSON):
        return {"table": table, "n": n, "nested": [1, 2.5, "three"]}
    if isinstance(kind, String | Text):
        return f"{table}.{column.name} {n}"
    raise AssertionError(f"no value for {table}.{column.name} ({kind!r})")


def run_row(columns: set[str], variant: dict, n: int) -> dict:
    """A run of ``variant`` with an open config (as the revisions before 0011 stored them) at this revision."""
    row = {k: v for k, v in variant.items() if k in columns}
    row["config"] = {**OPEN_CONFIG, "seed": n}
    if variant.get("submitted"):  # the others: each its own group made by hand, named by value_for
        row |= {"group_id": SUBMITTED_GROUP, "name": f"tiny-holmes [seed {n}]", "requested_device": "cpu"}
    if "report_id" in columns:
        row["report_id"] = None if variant["origin"] != "reported" else f"report-{n}"
    return row


def fill_every_table(conn: Connection) -> dict[str, int]:
    """Rows in every table of the database as it is now (parents first): each run variant, and two rows of every
    other table, foreign keys pointing at real rows. Returns the count per table."""
    meta = MetaData()
    meta.reflect(conn)
    counter = itertools.count()
    for table in meta.sorted_tables:
        if table.name == "alembic_version":
            continue
        variants = RUN_VARIANTS if table.name == "runs" else [{}, {}]
        for variant in variants:
            n = next(counter)
            row = {}
            for column in table.columns:
                if column.primary_key and column.autoincrement is not False and isinstance(column.type, Integer) \
                        and len(table.primary_key.columns) == 1:
                    continue  # the database numbers it
                foreign = next(iter(column.foreign_keys), None)
                if foreign is not None:
                    parent = foreign.column
                    row[column.name] = conn.execute(select(parent).order_by(parent.desc()).limit(1)).scalar()
                else:
                    row[column.name] = value_for(table.name, column, n)
            if table.name == "runs":
                row.update(run_row(set(table.columns.keys()), variant, n))
            conn.execute(insert(table).values(**row))
    return {t.name: conn.execute(text(f'SELECT count(*) FROM "{t.name}"')).scalar_one()
            for t in meta.sorted_tables if t.name != "alembic_version"}


def snapshot(conn: Connection, columns_of: dict[str, list[str]] | None = None) -> dict[str, tuple[list, list]]:
    """Every row of every table as the driver hands it back, in primary-key order: table -> (columns, rows), of
    ``columns_of``'s columns (default: the ones it has now)."""
    meta = MetaData()
    meta.reflect(conn)
    out = {}
    for name, table in meta.tables.items():
        if name == "alembic_version" or (columns_of is not None and name not in columns_of):
            continue
        names = columns_of[name] if columns_of is not None else [c.name for c in table.columns]
        shown = ", ".join(f'"{c}"' for c in names)
        order = ", ".join(f'"{c.name}"' for c in table.primary_key.columns)
        out[name] = (names, [tuple(r) for r in conn.execute(text(f'SELECT {shown} FROM "{name}" ORDER BY {order}'))])
    return out


def as_dict(value: object) -> dict:
    return json.loads(value) if isinstance(value, str) else value


def check_every_group_was_named(conn: Connection) -> None:
    """Each group the runs had got a name (migration 0012): a submission's from its runs' name and seeds, a group
    made by hand its id."""
    runs = conn.execute(text("SELECT group_id, config FROM runs WHERE group_id IS NOT NULL ORDER BY id")).all()
    names = dict(conn.execute(text("SELECT id, name FROM run_groups")).all())
    assert set(names) == {g for g, _ in runs}
    seeds = [as_dict(c)["seed"] for g, c in runs if g == SUBMITTED_GROUP]
    assert seeds == list(range(seeds[0], seeds[0] + 3))  # the rows' numbers, one after another
    assert names.pop(SUBMITTED_GROUP) == f"tiny-holmes, seeds {seeds[0]}-{seeds[-1]}"
    assert all(name == group_id for group_id, name in names.items()) and len(names) == len(RUN_VARIANTS) - 3


def check_the_runs_to_train_were_resolved(conn: Connection) -> None:
    """The runs still to train (of this dashboard) got their training options resolved, as this version resolves
    them, every option set kept (migration 0011); the others none."""
    rows = conn.execute(text("SELECT status, kind, origin, config, resolved_config FROM runs ORDER BY id")).all()
    assert len(rows) == len(RUN_VARIANTS)
    for status, kind, origin, config, resolved in rows:
        config, resolved = as_dict(config), resolved and as_dict(resolved)
        if not (status in UNFINISHED and kind == "train" and origin == "dashboard"):
            assert resolved is None
            continue
        assert {k: v for k, v in resolved.items() if config.get(k) is not None} == \
            {k: v for k, v in config.items() if v is not None and k != "dataset"}
        expected = TrainConfig.from_dict({k: v for k, v in config.items() if k != "dataset"}).resolved()
        assert TrainConfig.from_dict(resolved) == expected
        assert (resolved["arch"], resolved["d_model"], resolved["n_layers"], resolved["warmup"],
                resolved["eval_batches"]) == ("modern", 64, 4, 3, 5)


@pytest.mark.parametrize("revision", OLDER)
def test_an_upgrade_from_every_earlier_revision_keeps_every_row_and_value(settings, revision):
    migrate_to(settings, revision)
    engine = engine_for(settings.db_url)
    with engine.begin() as conn:
        counts = fill_every_table(conn)
    assert counts and min(counts.values()) >= 2, counts  # rows in every table there is
    with engine.connect() as conn:
        before = snapshot(conn)
    init_db(settings)
    with engine.connect() as conn:
        after = snapshot(conn, {name: columns for name, (columns, _) in before.items()})
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == REVISIONS[-1]
        # the upgraded schema is the one a new database gets
        assert compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), SQLModel.metadata) == []
    assert after == before  # every row, every value (the runs' options as submitted included)
    with engine.connect() as conn:
        if revision < "0011":  # from 0011 on, runs store them when submitted (kept as they were: above)
            check_the_runs_to_train_were_resolved(conn)
        if revision < "0012":  # from 0012 on, the groups' rows are filled as they were (kept: above)
            check_every_group_was_named(conn)
    backups = sorted((settings.home_dir / "backups").glob("tinygpt-*.db"))
    if settings.db_url.startswith("sqlite"):  # the backup is the database as it was
        assert [b.name.split("-")[-1] for b in backups] == [f"{revision}.db"]
        assert schema.file_revision(backups[0]) == revision
        with sqlite3.connect(backups[0]) as backup:
            assert backup.execute("SELECT count(*) FROM runs").fetchone()[0] == len(RUN_VARIANTS)
    else:  # PostgreSQL's backups are pg_dump's
        assert backups == []


def test_an_upgrade_that_would_lose_rows_is_rolled_back_whole(settings, monkeypatch):
    """A migration that deletes rows (as 0003's rebuilt ``runs`` did with foreign keys on): refused, and the
    database is as it was, its schema changes undone too."""
    migrate_to(settings, "0009")
    engine = engine_for(settings.db_url)
    with engine.begin() as conn:
        fill_every_table(conn)
    real_upgrade = command.upgrade

    def losing_upgrade(config, revision):  # noqa: ANN001
        real_upgrade(config, revision)
        config.attributes["connection"].execute(text("DELETE FROM metrics"))

    monkeypatch.setattr(command, "upgrade", losing_upgrade)
    with pytest.raises(UpgradeRefused, match=r"would have lost rows \(metrics: 2 -> 0\); it was rolled back"):
        init_db(settings)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0009"
        assert conn.execute(text("SELECT count(*) FROM metrics")).scalar() == 2
        columns = {c["name"] for c in inspect(conn).get_columns("runs")}
        assert "pool" not in columns  # 0010's new column: rolled back with the rest


def test_without_auto_migrate_an_older_schema_is_refused_until_db_upgrade(tmp_path):
    settings = Settings(home=tmp_path, auto_migrate=False)
    migrate_to(settings, "0008")
    with engine_for(settings.db_url).begin() as conn:
        fill_every_table(conn)
    with pytest.raises(SchemaOutOfDate, match=f"at revision 0008 and this version needs {REVISIONS[-1]}: run "
                       "`tinygpt db upgrade`"):
        init_db(settings)
    env = {"TINYGPT_HOME": str(tmp_path), "TINYGPT_AUTO_MIGRATE": "false"}
    refused = tinygpt_here("worker", "--devices", "cpu", env=env)
    assert (refused.returncode, refused.stderr) == (2, f"tinygpt worker: error: the database is at revision 0008 "
                                                       f"and this version needs {REVISIONS[-1]}: run `tinygpt db "
                                                       "upgrade` (TINYGPT_AUTO_MIGRATE is false)\n")
    status = tinygpt_here("db", "status", env=env, check=True)
    assert status.stdout.startswith(f"database sqlite:///{tmp_path}/tinygpt.db: revision 0008; this version (")
    assert status.stdout.endswith(f"needs {REVISIONS[-1]}: run `tinygpt db upgrade`\n")
    upgraded = tinygpt_here("db", "upgrade", env=env, check=True)
    backup = next((tmp_path / "backups").glob("tinygpt-*-0008.db"))
    assert upgraded.stdout == f"database at revision {REVISIONS[-1]} (was 0008); a backup of it before: {backup}\n"
    init_db(settings)  # up to date: nothing refused
    again = tinygpt_here("db", "upgrade", env=env, check=True)
    assert again.stdout == f"database at revision {REVISIONS[-1]} (it was already)\n"


def test_backups_keep_the_newest_and_restore_brings_a_database_back(tmp_path):
    settings = Settings(home=tmp_path, backups_kept=2)
    env = {"TINYGPT_HOME": str(tmp_path), "TINYGPT_BACKUPS_KEPT": "2"}
    init_db(settings)
    engine = engine_for(settings.db_url)
    with engine.begin() as conn:
        fill_every_table(conn)
        before = snapshot(conn)
    written = [tinygpt_here("db", "backup", env=env, check=True).stdout.removeprefix("wrote ").strip()
               for _ in range(3)]
    kept = sorted(str(p) for p in (tmp_path / "backups").glob("tinygpt-*.db"))
    assert kept == written[1:]  # the oldest removed
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM metrics"))
        conn.execute(text("DELETE FROM runs WHERE status = 'queued'"))
    restored = tinygpt_here("db", "restore", written[-1], env=env, check=True)
    kept_now = sorted(str(p) for p in (tmp_path / "backups").glob("tinygpt-*.db"))
    assert restored.stdout == (f"restored {written[-1]} into {tmp_path / 'tinygpt.db'}; the database it replaced: "
                               f"{kept_now[-1]}\n")
    engine.dispose()
    with engine.connect() as conn:
        assert snapshot(conn) == before
    with sqlite3.connect(kept_now[-1]) as replaced:  # the state it replaced was backed up: undoable
        assert replaced.execute("SELECT count(*) FROM metrics").fetchone()[0] == 0


def test_restore_refuses_what_it_cannot_use(tmp_path):
    env = {"TINYGPT_HOME": str(tmp_path / "home")}
    not_a_db = tmp_path / "notes.db"
    not_a_db.write_text("not a database")
    bad = tinygpt_here("db", "restore", not_a_db, env=env)
    assert (bad.returncode, bad.stderr) == (2, f"tinygpt db restore: error: {not_a_db} is not a SQLite database "
                                               "(file is not a database)\n")
    newer = tmp_path / "newer.db"
    with sqlite3.connect(newer) as conn:
        conn.executescript("CREATE TABLE alembic_version (version_num TEXT); INSERT INTO alembic_version VALUES "
                           "('9999'); CREATE TABLE runs (id INTEGER)")
    refused = tinygpt_here("db", "restore", newer, env=env)
    assert refused.stderr == (f"tinygpt db restore: error: {newer} is at revision 9999, which this version "
                              f"({REVISIONS[-1]}) does not know\n")
    live = Settings(home=tmp_path / "home")
    init_db(live)
    backup = tinygpt_here("db", "backup", env=env, check=True).stdout.removeprefix("wrote ").strip()
    with engine_for(live.db_url).begin() as conn:
        conn.execute(text("INSERT INTO workers (name, host, pid, devices, started_at, heartbeat_at) VALUES "
                          "('box:1', 'box', 1, '[]', :now, :now)"), {"now": datetime.now(UTC)})
    running = tinygpt_here("db", "restore", backup, env=env)
    assert running.stderr == ("tinygpt db restore: error: the dashboard is running (worker box:1): stop it before "
                              "restoring a backup\n")


def test_a_database_of_a_newer_version_is_refused(tmp_path):
    settings = Settings(home=tmp_path)
    init_db(settings)
    with engine_for(settings.db_url).begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    with pytest.raises(SchemaError, match="at revision 0099, which this version .* does not know: it was upgraded by "
                       "a newer version"):
        init_db(settings)


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("arch", [None, *ARCHS])
def test_migration_0011_resolves_as_this_version_does(preset, arch):  # noqa: D103
    """0011 carries its own copy of the presets and rules (a later version's may differ): today they agree."""
    resolve = importlib.import_module("app.migrations.versions.0011_resolved_options").resolved
    options = {"preset": preset, "arch": arch, "steps": 700, "eval_every": 100, "grad_accum": 2}
    config = TrainConfig(**options)
    expected = {k: v for k, v in config.resolved().to_dict().items() if k in resolve(config.to_dict())}
    assert resolve(config.to_dict()) == expected
    assert TrainConfig.from_dict(resolve(config.to_dict())).model_config() == config.model_config()


#: The model fields a checkpoint of revision 0006's version (commit 6ed0c04) did not have yet.
FIELDS_ADDED_SINCE_0006 = ("qk_norm", "untied_head", "attn_dropout")


def open_config(config: dict) -> dict:
    """A run's options as a version before 0011 stored them: what the preset decides left unset."""
    return {**config, **{name: None for name in ("arch", "vocab_size", "d_model", "n_layers", "n_heads", "context",
                                                  "dropout", "pos", "norm", "mlp", "warmup", "eval_batches",
                                                  "log_every", "sample_every")}}


def test_runs_queued_and_running_at_an_old_revision_finish_after_the_upgrade_with_their_model(
        tmp_path, make_app, slice_path, warm_cache):
    """A database at 0010 holding a queued run and a running one whose job died with the old version, its last.pt
    written by a version whose model config had fewer fields: after the upgrade (a worker of this version
    starting), the queued run trains and the running one resumes from its last.pt, both with the model they were
    submitted with (the failure of issue 51: "holds a different model; cannot resume")."""
    from tinygpt.checkpoint import read_checkpoint, save_checkpoint
    from tinygpt.train import Trainer

    from .service_helpers import Worker, make_home, wait_for

    home = make_home(tmp_path, slice_path, warm_cache)
    client = make_app(home=home.path)
    runs = [r.json()[0] for r in (client.post("/api/runs", json={"preset": "tiny", "device": "cpu", "precision":
                                                                 "fp32", "batch_size": 4, "steps": 30,
                                                                 "eval_every": 10, "threads": 1, "name": name})
                                  for name in ("queued", "running"))]
    settings = Settings(home=home.path, holmes_path=slice_path)
    engine = engine_for(settings.db_url)
    with engine.begin() as conn:  # as 0010's version left them: options open, the second run's job gone
        for run in runs:
            conn.execute(text("UPDATE runs SET config = :config WHERE id = :id"),
                         {"config": json.dumps(open_config(run["config"])), "id": run["id"]})
        conn.execute(text("UPDATE runs SET status = 'running', worker = 'old:1', attempt = 1, heartbeat_at = "
                          ":then, started_at = :then WHERE id = :id"),
                     {"then": datetime.now(UTC) - timedelta(hours=1), "id": runs[1]["id"]})
        command.downgrade(alembic_config(conn), "0010")
    out = home.path / "runs" / str(runs[1]["id"])
    options = {k: v for k, v in open_config(runs[1]["config"]).items() if k in TrainConfig.__dataclass_fields__}
    Trainer(TrainConfig.from_dict({**options, "steps": 10, "corpus": str(slice_path)}), out,
            cache_dir=home.path / "cache").run()
    last = read_checkpoint(out / "last.pt")
    last["model_config"] = {k: v for k, v in last["model_config"].items() if k not in FIELDS_ADDED_SINCE_0006}
    save_checkpoint(out / "last.pt", last)

    worker = Worker(home, "upgraded")
    try:
        def statuses() -> set[str]:  # from the database: the app here knows only the schema of this version
            with engine.connect() as conn:
                return set(conn.execute(text("SELECT status FROM runs")).scalars())

        wait_for(lambda: statuses() <= {"succeeded", "failed"}, timeout=180, message="both runs to end")
    finally:
        worker.stop()
    ended = [client.get(f"/api/runs/{r['id']}").json() for r in runs]
    assert [(r["status"], r["error"], r["last_step"]) for r in ended] == [("succeeded", None, 30)] * 2, worker.output()
    assert "resumed from" in worker.output() and f"{out / 'last.pt'} at step 10" in worker.output()
    submitted = TrainConfig(preset="tiny").model_config()  # the tiny preset's model, as at 0010
    for run in ended:
        best = read_checkpoint(home.path / "runs" / str(run["id"]) / "best.pt")
        assert TrainConfig.from_dict(run["resolved_config"]).model_config() == submitted
        assert (run["resolved_config"]["d_model"], run["resolved_config"]["n_layers"]) == (64, 4)
        assert run["config"]["d_model"] is None  # as submitted
        assert best["model_config"] == submitted.to_dict()
    assert len(list((home.path / "backups").glob("tinygpt-*-0010.db"))) == 1
