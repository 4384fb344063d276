"""browser sessions: logins that expire, end at logout and end when the API token changes

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02 09:00:00

Cookies of the earlier kind (a fixed value derived from the token) are no longer accepted: browsers log in again.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('browser_sessions',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('token_fingerprint', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('expires_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('browser_sessions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_browser_sessions_expires_at'), ['expires_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('browser_sessions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_browser_sessions_expires_at'))
    op.drop_table('browser_sessions')
