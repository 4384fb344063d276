"""reported and imported runs: where a run was trained, the trainer's report id and journal position

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 17:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('origin', sqlmodel.sql.sqltypes.AutoString(), nullable=False,
                                      server_default='dashboard'))
        batch_op.add_column(sa.Column('report_id', sqlmodel.sql.sqltypes.AutoString(), nullable=True))
        batch_op.add_column(sa.Column('report_seq', sa.Integer(), nullable=False, server_default='0'))
        batch_op.create_index(batch_op.f('ix_runs_report_id'), ['report_id'], unique=True)


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_runs_report_id'))
        batch_op.drop_column('report_seq')
        batch_op.drop_column('report_id')
        batch_op.drop_column('origin')
