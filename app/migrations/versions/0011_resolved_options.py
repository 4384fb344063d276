"""resolved options: a run's training options as resolved at submission (``runs.resolved_config``), filled for the
runs still to train (queued, running, crashed) as this revision's code resolved them

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05 16:00:00

Runs submitted from now on store them when they are submitted (``TrainConfig.resolved``); this fixes the meaning
of the runs submitted before that will train after the upgrade. ``config`` (the options as submitted) is left as it
is, and finished runs get none (they never train again). The presets,
architectures and rules are copied here as tinygpt/presets.py and tinygpt/run_config.py had them from revision
0001 to this one: a later version's may differ, and these runs were submitted under these.
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None

UNFINISHED = ('queued', 'running', 'crashed')
NOT_TRAINING_OPTIONS = ('dataset', 'gpus', 'resume', 'notify')  # what the dashboard adds to a run's options
#: preset: (default architecture, sizes)
PRESETS = {
    'holmes': ('series', {'vocab_size': 4096, 'd_model': 256, 'n_heads': 4, 'n_layers': 6, 'context': 256, 'dropout': 0.1}),
    'tiny': ('modern', {'vocab_size': 4096, 'd_model': 64, 'n_heads': 4, 'n_layers': 4, 'context': 128, 'dropout': 0.0}),
    'student': ('modern', {'vocab_size': 4096, 'd_model': 192, 'n_heads': 6, 'n_layers': 4, 'context': 256,
                           'dropout': 0.1}),
    'small': ('modern', {'vocab_size': 4096, 'd_model': 256, 'n_heads': 4, 'n_layers': 4, 'context': 128, 'dropout': 0.1}),
}
ARCHS = {'series': {'pos': 'rope', 'norm': 'layernorm', 'mlp': 'gelu'},
         'classic': {'pos': 'learned', 'norm': 'layernorm', 'mlp': 'gelu'},
         'modern': {'pos': 'rope', 'norm': 'rmsnorm', 'mlp': 'swiglu'}}
EVAL_BATCHES_MAX = 20


def resolved(config: dict) -> dict:
    """``config`` with the options left open filled; the ones set are kept as they are."""
    if config.get('preset', 'holmes') not in PRESETS:
        return config
    default_arch, sizes = PRESETS[config.get('preset', 'holmes')]
    arch = config.get('arch') or default_arch
    if arch not in ARCHS:
        return config
    filled = {'arch': arch, 'qk_norm': False, 'untied_head': False, **sizes, **ARCHS[arch]}
    out = {**config, **{k: v for k, v in filled.items() if config.get(k) is None}}
    steps, eval_every = int(out.get('steps', 1500)), int(out.get('eval_every', 250))
    rules = {'warmup': min(200, steps // 10),
             'eval_batches': max(1, min(EVAL_BATCHES_MAX, min(eval_every, steps) * int(out.get('grad_accum', 1)) // 2)),
             'log_every': min(10, eval_every), 'sample_every': eval_every}
    return {**out, **{k: v for k, v in rules.items() if out.get(k) is None}}


def upgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('resolved_config', sa.JSON(), nullable=True))
    conn = op.get_bind()
    runs = sa.table('runs', sa.column('id', sa.Integer), sa.column('config', sa.JSON),
                    sa.column('resolved_config', sa.JSON), sa.column('status'), sa.column('kind'), sa.column('origin'))
    rows = conn.execute(sa.select(runs.c.id, runs.c.config).where(
        runs.c.status.in_(UNFINISHED), runs.c.kind == 'train', runs.c.origin == 'dashboard')).all()
    for run_id, config in rows:
        config = json.loads(config) if isinstance(config, str) else config
        options = {k: v for k, v in resolved(config).items() if k not in NOT_TRAINING_OPTIONS}
        conn.execute(runs.update().where(runs.c.id == run_id).values(resolved_config=options))


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_column('resolved_config')
