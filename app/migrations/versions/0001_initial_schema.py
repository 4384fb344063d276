"""initial schema

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-30 10:26:11.103903
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('datasets',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('sha256', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('bytes', sa.BigInteger(), nullable=False),
    sa.Column('chars', sa.BigInteger(), nullable=False),
    sa.Column('path', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('builtin', sa.Boolean(), nullable=False),
    sa.Column('tokenizers', sa.JSON(), nullable=False),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('datasets', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_datasets_name'), ['name'], unique=True)

    op.create_table('events',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=True),
    sa.Column('type', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('data', sa.JSON(), nullable=False),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sqlite_autoincrement=True
    )
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.create_index('ix_events_run_id_id', ['run_id', 'id'], unique=False)

    op.create_table('runs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('kind', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('status', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('config', sa.JSON(), nullable=False),
    sa.Column('requested_device', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('device', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('device_info', sa.JSON(), nullable=True),
    sa.Column('precision', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('params', sa.Integer(), nullable=True),
    sa.Column('worker', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('pid', sa.Integer(), nullable=True),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('cancel_requested', sa.Boolean(), nullable=False),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('started_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.Column('finished_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.Column('heartbeat_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('last_step', sa.Integer(), nullable=False),
    sa.Column('best_val_loss', sa.Float(), nullable=True),
    sa.Column('best_step', sa.Integer(), nullable=True),
    sa.Column('checkpoint_path', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('out_dir', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('tags', sa.JSON(), nullable=False),
    sa.Column('notes', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('group_id', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sqlite_autoincrement=True
    )
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_runs_group_id'), ['group_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_runs_status'), ['status'], unique=False)
        batch_op.create_index('ix_runs_status_id', ['status', 'id'], unique=False)

    op.create_table('benchmark_results',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('preset', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('device', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('precision', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('batch_size', sa.Integer(), nullable=False),
    sa.Column('threads', sa.Integer(), nullable=True),
    sa.Column('tokens_per_sec', sa.Float(), nullable=True),
    sa.Column('ms_per_step', sa.Float(), nullable=True),
    sa.Column('peak_mem_mib', sa.Float(), nullable=True),
    sa.Column('oom', sa.Boolean(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('benchmark_results', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_benchmark_results_run_id'), ['run_id'], unique=False)

    op.create_table('metrics',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('train_loss', sa.Float(), nullable=False),
    sa.Column('val_loss', sa.Float(), nullable=True),
    sa.Column('lr', sa.Float(), nullable=False),
    sa.Column('tokens_per_sec', sa.Float(), nullable=False),
    sa.Column('elapsed_sec', sa.Float(), nullable=False),
    sa.Column('tokens_seen', sa.BigInteger(), nullable=False),
    sa.Column('epochs', sa.Float(), nullable=False),
    sa.Column('peak_mem_mib', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('metrics', schema=None) as batch_op:
        batch_op.create_index('ix_metrics_run_step', ['run_id', 'step'], unique=False)

    op.create_table('samples',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('prompt', sa.Text(), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('samples', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_samples_run_id'), ['run_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('samples', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_samples_run_id'))

    op.drop_table('samples')
    with op.batch_alter_table('metrics', schema=None) as batch_op:
        batch_op.drop_index('ix_metrics_run_step')

    op.drop_table('metrics')
    with op.batch_alter_table('benchmark_results', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_benchmark_results_run_id'))

    op.drop_table('benchmark_results')
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index('ix_runs_status_id')
        batch_op.drop_index(batch_op.f('ix_runs_status'))
        batch_op.drop_index(batch_op.f('ix_runs_group_id'))

    op.drop_table('runs')
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.drop_index('ix_events_run_id_id')

    op.drop_table('events')
    with op.batch_alter_table('datasets', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_datasets_name'))

    op.drop_table('datasets')
