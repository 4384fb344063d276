"""time to target: the whole validation split's loss on metric rows, a run's target and when it reached it, a
dataset's own target

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03 02:00:00

Runs recorded before this have no target and no bytes per token (their bits per byte stay unknown).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('metrics', schema=None) as batch_op:
        batch_op.add_column(sa.Column('val_loss_full', sa.Float(), nullable=True))
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('target_val_loss', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('val_bytes_per_token', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('target_step', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('target_tokens', sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column('target_sec', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('target_exact', sa.Boolean(), nullable=True))
    with op.batch_alter_table('datasets', schema=None) as batch_op:
        batch_op.add_column(sa.Column('target_val_loss', sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('datasets', schema=None) as batch_op:
        batch_op.drop_column('target_val_loss')
    with op.batch_alter_table('runs', schema=None) as batch_op:
        for name in ('target_exact', 'target_sec', 'target_tokens', 'target_step', 'val_bytes_per_token', 'target_val_loss'):
            batch_op.drop_column(name)
    with op.batch_alter_table('metrics', schema=None) as batch_op:
        batch_op.drop_column('val_loss_full')
