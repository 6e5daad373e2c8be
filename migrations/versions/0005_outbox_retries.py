"""Outbox retries: how often a reply failed to go out, and why.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("outbox", sa.Column("attempts", sa.Integer, nullable=False, server_default="0"))
    op.add_column("outbox", sa.Column("last_error", sa.Text))


def downgrade() -> None:
    op.drop_column("outbox", "last_error")
    op.drop_column("outbox", "attempts")
