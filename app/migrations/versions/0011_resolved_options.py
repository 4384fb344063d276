"""resolved options: the runs still to train (queued, running, crashed) get every option their preset, architecture
or a rule left open written into their stored options, as this revision's code resolved them

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05 16:00:00

Runs submitted from now on store them resolved (``TrainConfig.resolved``); this fixes the meaning of the runs
submitted before, which will train after the upgrade. Finished runs keep their options as recorded. The presets,
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
    conn = op.get_bind()
    runs = sa.table('runs', sa.column('id', sa.Integer), sa.column('config', sa.JSON), sa.column('status'),
                    sa.column('kind'), sa.column('origin'))
    rows = conn.execute(sa.select(runs.c.id, runs.c.config).where(
        runs.c.status.in_(UNFINISHED), runs.c.kind == 'train', runs.c.origin == 'dashboard')).all()
    for run_id, config in rows:
        config = json.loads(config) if isinstance(config, str) else config
        new = resolved(config)
        if new != config:
            conn.execute(runs.update().where(runs.c.id == run_id).values(config=new))


def downgrade() -> None:
    pass  # resolved options mean what the open ones meant: nothing to undo
