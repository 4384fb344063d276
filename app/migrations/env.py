"""Alembic environment: the app's tables (SQLModel metadata) on the connection that app.db hands over.

Migrations run from :func:`app.db.init_db` at start-up (app, worker), which passes an open
connection in ``config.attributes["connection"]``; the ``alembic`` command line also works
with ``-x url=...``.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine
from sqlmodel import SQLModel

from app import models  # noqa: F401  (registers the tables)

target_metadata = SQLModel.metadata


def run_migrations(connection) -> None:  # noqa: ANN001
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True,
                      compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is not None:
    run_migrations(connection)
else:
    url = context.get_x_argument(as_dictionary=True).get("url") or context.config.get_main_option("sqlalchemy.url")
    with create_engine(url).connect() as conn:
        run_migrations(conn)
