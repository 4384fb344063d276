"""slurm pool: where a run trains (local workers or a Slurm cluster), its Slurm job, its run-scoped token, a pruned Slurm trial

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 18:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None

TEXT_COLUMNS = ('time_limit', 'slurm_job_id', 'slurm_state', 'slurm_reason', 'job_token_hash')


def upgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('pool', sqlmodel.sql.sqltypes.AutoString(), nullable=False,
                                      server_default='local'))
        for name in TEXT_COLUMNS:
            batch_op.add_column(sa.Column(name, sqlmodel.sql.sqltypes.AutoString(), nullable=True))
        batch_op.add_column(sa.Column('job_script', sa.Text(), nullable=True))
        batch_op.add_column(sa.Column('prune_requested', sa.Boolean(), nullable=False, server_default=sa.false()))
        batch_op.create_index(batch_op.f('ix_runs_pool'), ['pool'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_runs_pool'))
        for name in ('prune_requested', 'job_script', *TEXT_COLUMNS, 'pool'):
            batch_op.drop_column(name)
