"""The schema: Alembic migrations applied at start-up, on SQLite and PostgreSQL."""

from __future__ import annotations

import subprocess
import sys

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text
from sqlmodel import Session, SQLModel, select

from app import models  # noqa: F401
from app.db import engine_for, init_db
from app.schema import FIRST_REVISION, alembic_config, head_revision
from app.settings import Settings

TABLES = {"runs", "metrics", "samples", "events", "datasets", "benchmark_results", "alembic_version"}


@pytest.fixture(params=["sqlite", "postgresql"])
def settings(request, tmp_path) -> Settings:
    if request.param == "sqlite":
        return Settings(home=tmp_path)
    return Settings(home=tmp_path, database_url=request.getfixturevalue("postgres").create_database())


def test_start_up_creates_the_schema_at_the_head_revision_and_is_idempotent(settings):
    engine = init_db(settings)
    init_db(settings)  # a second start changes nothing
    assert TABLES <= set(inspect(engine).get_table_names())
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == head_revision()


def test_the_models_and_the_migrations_agree(settings):
    """A model change without a migration fails here (write one: alembic revision --autogenerate)."""
    engine = init_db(settings)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), SQLModel.metadata)
    assert diff == []


def migrate_to(settings: Settings, revision: str) -> None:
    with engine_for(settings.db_url).begin() as connection:
        command.upgrade(alembic_config(connection), revision)


def test_a_database_from_before_migrations_is_adopted_with_its_data(tmp_path):
    """The first released schema (0001) without Alembic's table, as the version before migrations made it."""
    settings = Settings(home=tmp_path)
    migrate_to(settings, FIRST_REVISION)
    legacy = create_engine(settings.db_url)
    with legacy.begin() as conn:
        conn.execute(text("DROP TABLE alembic_version"))
        conn.execute(text("INSERT INTO runs (name, kind, status, config, requested_device, attempt, "
                          "cancel_requested, created_at, last_step, tags, notes) VALUES ('old', 'train', 'succeeded', "
                          "'{}', 'cpu', 1, 0, '2026-01-01 00:00:00', 5, '[]', '')"))
    legacy.dispose()
    engine = init_db(settings)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT name, last_step FROM runs")).all() == [("old", 5)]
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == head_revision()


def test_runs_of_the_first_schema_upgrade_and_still_list(settings):
    """A database at revision 0001 with a finished run: after the upgrade it lists, reads and compares."""
    from app.models import Run
    from app.services.compare import compare_runs
    from app.services.runs import list_runs

    migrate_to(settings, FIRST_REVISION)
    with engine_for(settings.db_url).begin() as conn:
        for name in ("cpu run", "gpu run"):
            conn.execute(text("INSERT INTO runs (name, kind, status, config, requested_device, device, worker, "
                              "attempt, cancel_requested, created_at, last_step, tags, notes) VALUES (:name, 'train', "
                              "'succeeded', '{\"preset\": \"tiny\", \"steps\": 5}', 'cpu', 'cpu', 'vm:cpu', 1, "
                              "false, '2026-01-01 00:00:00', 5, '[]', '')"), {"name": name})
    init_db(settings)
    with Session(engine_for(settings.db_url)) as session:
        page = list_runs(session)
        assert [(r.name, r.status, r.steps) for r in page.items] == [("gpu run", "succeeded", 5), ("cpu run", "succeeded", 5)]
        assert page.items[0].worker.model_dump() == {"name": "vm:cpu", "host": None}
        ids = [r.id for r in session.exec(select(Run)).all()]
        assert [s["name"] for s in compare_runs(session, ids=ids)["runs"]] == ["cpu run", "gpu run"]


@pytest.mark.slow  # 15 s on 2 cores: four processes importing the app at once (the default suite stays under 15 min)
def test_processes_starting_together_migrate_once(tmp_path):
    code = ("import sys; from app.db import init_db; from app.settings import Settings; "
            "init_db(Settings(home=sys.argv[1])); print('ok')")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, outputs
    assert [o[0].strip() for o in outputs] == ["ok"] * 4
    engine = engine_for(Settings(home=tmp_path).db_url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM alembic_version")).scalar() == 1
