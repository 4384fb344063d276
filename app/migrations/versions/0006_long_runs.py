"""long runs: block summaries of the metrics, an index of the evaluation rows, a bounded metric outbox

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 21:00:00

The block summaries are filled from the rows already there, and a finished run's median tokens/s is stored; the
old metric events are deleted by the app's compaction once it starts.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None

BLOCK_STEPS = (64, 4096)  # as app/services/metric_blocks.py had them when this was written
FINISHED = ('succeeded', 'failed', 'cancelled', 'crashed', 'pruned')


def upgrade() -> None:
    op.create_table('metric_blocks',
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('level', sa.Integer(), nullable=False),
    sa.Column('block', sa.Integer(), nullable=False),
    sa.Column('first_step', sa.Integer(), nullable=False),
    sa.Column('last_step', sa.Integer(), nullable=False),
    sa.Column('rows', sa.Integer(), nullable=False),
    sa.Column('min_train_loss', sa.Float(), nullable=True),
    sa.Column('max_train_loss', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_id', 'level', 'block')
    )
    with op.batch_alter_table('metrics', schema=None) as batch_op:
        batch_op.create_index('ix_metrics_run_eval_step', ['run_id', 'step'], unique=False,
                              sqlite_where=sa.text('val_loss IS NOT NULL'),
                              postgresql_where=sa.text('val_loss IS NOT NULL'))
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.create_index('ix_events_type_created_at', ['type', 'created_at'], unique=False)
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('events_trimmed_to', sa.Integer(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('tokens_per_sec', sa.Float(), nullable=True))
    for level, size in enumerate(BLOCK_STEPS):
        op.execute(f"INSERT INTO metric_blocks (run_id, level, block, first_step, last_step, rows, min_train_loss, "
                   f"max_train_loss) SELECT run_id, {level}, step / {size}, min(step), max(step), count(*), "
                   f"min(train_loss), max(train_loss) FROM metrics GROUP BY run_id, step / {size}")
    store_median_rates()


def store_median_rates() -> None:
    conn = op.get_bind()
    finished = ", ".join(f"'{s}'" for s in FINISHED)
    for (run_id,) in conn.execute(sa.text(f"SELECT id FROM runs WHERE status IN ({finished})")).all():
        rates = "FROM metrics WHERE run_id = :run AND tokens_per_sec > 0"
        count = conn.execute(sa.text(f"SELECT count(*) {rates}"), {"run": run_id}).scalar_one()
        if count:
            middle = conn.execute(sa.text(f"SELECT tokens_per_sec {rates} ORDER BY tokens_per_sec LIMIT :n OFFSET :at"),
                                  {"run": run_id, "n": 2 - count % 2, "at": (count - 1) // 2}).scalars().all()
            conn.execute(sa.text("UPDATE runs SET tokens_per_sec = :rate WHERE id = :run"),
                         {"rate": sum(middle) / len(middle), "run": run_id})


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_column('tokens_per_sec')
        batch_op.drop_column('events_trimmed_to')
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.drop_index('ix_events_type_created_at')
    with op.batch_alter_table('metrics', schema=None) as batch_op:
        batch_op.drop_index('ix_metrics_run_eval_step', sqlite_where=sa.text('val_loss IS NOT NULL'),
                            postgresql_where=sa.text('val_loss IS NOT NULL'))
    op.drop_table('metric_blocks')
