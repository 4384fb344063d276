"""run groups: a name per group of runs (``run_groups``), filled for the groups the runs already have

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06 04:00:00

Until now a group was only an id on its runs (``runs.group_id``), shown as "group d5323098e855". Each group the runs
have gets a row here, named as this version names a new submission's group ("tiny-holmes, seeds 1337-1339") when it
was one (an id of 12 hex digits, its runs named "<base> [seed N]" or "<base> [device, seed N]"), else by its id (a
group made by hand). No run is changed. The naming rule is copied here as app/services/groups.py has it at this
revision: a later version's may differ.
"""

from __future__ import annotations

import json
import re

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None

SUBMISSION_GROUP = re.compile(r'[0-9a-f]{12}')  # the ids add_runs gives a submission's group
RUN_SUFFIX = re.compile(r' \[(?:[^\[\],]+, )?seed \d+\]$| \[[^\[\],]+\]$')  # " [cuda, seed 2]", " [seed 2]", " [cuda]"
NAME_MAX = 200


def seeds_text(seeds: list[int]) -> str:
    seeds = sorted(set(seeds))
    if len(seeds) == 1:
        return f'seed {seeds[0]}'
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f'seeds {seeds[0]}-{seeds[-1]}'
    return 'seeds ' + ', '.join(map(str, seeds))


def group_name(group_id: str, runs: list[tuple[str, str, dict]]) -> str:
    """``runs``: (name, requested device, config) of the group's runs, oldest first."""
    bases = {RUN_SUFFIX.sub('', name) for name, _, _ in runs}
    if not SUBMISSION_GROUP.fullmatch(group_id) or len(bases) != 1:
        return group_id
    devices = list(dict.fromkeys(device for _, device, _ in runs))
    on = '' if len(devices) < 2 else ' on ' + ', '.join(devices[:-1]) + f' and {devices[-1]}'
    seeds = [int(config.get('seed', 0)) for _, _, config in runs if isinstance(config.get('seed', 0), int)]
    return f'{bases.pop()}{on}, {seeds_text(seeds)}'[:NAME_MAX] if seeds else group_id


def upgrade() -> None:
    op.create_table(
        'run_groups',
        sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=50), nullable=False),
        sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint('id'),
    )
    conn = op.get_bind()
    runs = sa.table('runs', sa.column('id', sa.Integer), sa.column('name', sa.String), sa.column('config', sa.JSON),
                    sa.column('requested_device', sa.String), sa.column('group_id', sa.String),
                    sa.column('created_at', sa.DateTime))
    members: dict[str, list] = {}
    for _, name, device, config, group_id, created_at in conn.execute(
            sa.select(runs.c.id, runs.c.name, runs.c.requested_device, runs.c.config, runs.c.group_id,
                      runs.c.created_at).where(runs.c.group_id.is_not(None)).order_by(runs.c.id)):
        config = json.loads(config) if isinstance(config, str) else config
        members.setdefault(group_id, []).append((name, device, config if isinstance(config, dict) else {}, created_at))
    groups = sa.table('run_groups', sa.column('id', sa.String), sa.column('name', sa.String),
                      sa.column('created_at', sa.DateTime))
    for group_id, rows in members.items():
        conn.execute(groups.insert().values(id=group_id, name=group_name(group_id, [r[:3] for r in rows]),
                                            created_at=rows[0][3]))


def downgrade() -> None:
    op.drop_table('run_groups')
