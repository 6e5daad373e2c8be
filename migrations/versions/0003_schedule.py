"""Scheduled interrupts: when each agent's next opener and upkeep are due.

The scheduler claims due agents with FOR UPDATE SKIP LOCKED, so several processes never
take the same one; `openers_unanswered` and `last_opener_at` feed the opener policy.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.add_column("agents", sa.Column("next_opener_at", TS))
    op.add_column("agents", sa.Column("last_opener_at", TS))
    op.add_column(
        "agents",
        sa.Column("openers_unanswered", sa.Integer, nullable=False, server_default="0"),
    )
    op.add_column("agents", sa.Column("next_upkeep_at", TS))
    op.create_index(
        "agents_opener_due",
        "agents",
        ["next_opener_at"],
        postgresql_where="next_opener_at IS NOT NULL",
    )
    op.create_index(
        "agents_upkeep_due",
        "agents",
        ["next_upkeep_at"],
        postgresql_where="next_upkeep_at IS NOT NULL",
    )


def downgrade() -> None:
    op.drop_index("agents_upkeep_due")
    op.drop_index("agents_opener_due")
    for column in ("next_upkeep_at", "openers_unanswered", "last_opener_at", "next_opener_at"):
        op.drop_column("agents", column)
