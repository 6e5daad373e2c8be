"""Usage knows the bill: output tokens and cached input tokens beside the total.

`usage.tokens` stays the total (prompt + completion) that the token budgets count. The new
columns split it: `completion_tokens` (output) and `cached_tokens` (input the provider
served from its prompt cache, billed lower); uncached input is what remains. Days recorded
before this revision have neither, so they read as all uncached input.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for column in ("cached_tokens", "completion_tokens"):
        op.add_column("usage", sa.Column(column, sa.BigInteger, nullable=False, server_default="0"))


def downgrade() -> None:
    for column in ("completion_tokens", "cached_tokens"):
        op.drop_column("usage", column)
