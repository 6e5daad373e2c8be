"""Token usage per agent per day, for the daily budgets; events by time, for rate limits.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None
rewrites_tables = True  # builds events_agent_time over every event, writes to events waiting


def upgrade() -> None:
    op.create_table(
        "usage",
        sa.Column(
            "agent_id",
            sa.BigInteger,
            sa.ForeignKey("agents.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("day", sa.Date, primary_key=True),
        sa.Column(
            "tenant_id",
            sa.BigInteger,
            sa.ForeignKey("tenants.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("calls", sa.Integer, nullable=False, server_default="0"),
    )
    op.create_index("usage_tenant_day", "usage", ["tenant_id", "day"])
    op.create_index("events_agent_time", "events", ["agent_id", "created_at"])


def downgrade() -> None:
    op.drop_index("events_agent_time")
    op.drop_table("usage")
