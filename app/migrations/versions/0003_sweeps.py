"""sweeps: trials are runs, pruned status, disk used

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 10:00:38.103834
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('sweeps',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('status', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('config', sa.JSON(), nullable=False),
    sa.Column('tags', sa.JSON(), nullable=False),
    sa.Column('trials_planned', sa.Integer(), nullable=False),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('finished_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.Column('filled_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sqlite_autoincrement=True
    )
    with op.batch_alter_table('sweeps', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_sweeps_status'), ['status'], unique=False)

    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.add_column(sa.Column('sweep_id', sa.Integer(), nullable=True))
        batch_op.create_index(batch_op.f('ix_events_sweep_id'), ['sweep_id'], unique=False)

    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('sweep_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('trial', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('disk_bytes', sa.BigInteger(), nullable=False, server_default='0'))
        batch_op.create_index(batch_op.f('ix_runs_sweep_id'), ['sweep_id'], unique=False)
        batch_op.create_foreign_key('fk_runs_sweep_id_sweeps', 'sweeps', ['sweep_id'], ['id'], ondelete='SET NULL')



def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_constraint('fk_runs_sweep_id_sweeps', type_='foreignkey')
        batch_op.drop_index(batch_op.f('ix_runs_sweep_id'))
        batch_op.drop_column('disk_bytes')
        batch_op.drop_column('trial')
        batch_op.drop_column('sweep_id')

    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_events_sweep_id'))
        batch_op.drop_column('sweep_id')

    with op.batch_alter_table('sweeps', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_sweeps_status'))

    op.drop_table('sweeps')
