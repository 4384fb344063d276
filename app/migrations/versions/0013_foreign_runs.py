"""foreign runs: another trainer's metrics by their own names (``metric_series``), its client's tags
(``runs.client_tags``), and metrics rows that say what such a trainer did not log

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06 12:00:00

Runs of other trainers (TensorBoard files, speedrun logs) log a training loss, learning rate, tokens/s, tokens,
time or memory only where they do: those columns of ``metrics`` take NULL from now on. Every row already there
keeps its values (SQLite copies the table to change a column; PostgreSQL alters it in place).
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None

NOW_NULLABLE = {'train_loss': sa.Float(), 'lr': sa.Float(), 'tokens_per_sec': sa.Float(), 'elapsed_sec': sa.Float(),
                'tokens_seen': sa.BigInteger(), 'epochs': sa.Float(), 'peak_mem_mib': sa.Float()}


def upgrade() -> None:
    op.create_table('metric_series',
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=250), nullable=False),
    sa.Column('step', sa.BigInteger(), nullable=False),
    sa.Column('value', sa.Float(), nullable=False),
    sa.Column('is_nan', sa.Boolean(), nullable=False),
    sa.Column('wall_time', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_id', 'name', 'step')
    )
    with op.batch_alter_table('metrics', schema=None) as batch_op:
        for name, kind in NOW_NULLABLE.items():
            batch_op.alter_column(name, existing_type=kind, nullable=True)
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('client_tags', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_column('client_tags')
    with op.batch_alter_table('metrics', schema=None) as batch_op:
        for name, kind in NOW_NULLABLE.items():
            batch_op.alter_column(name, existing_type=kind, nullable=False)
    op.drop_table('metric_series')
