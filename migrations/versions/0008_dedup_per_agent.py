"""Dedup keys per agent: a platform id (a Slack file shared into two DMs) is not a member's.

The unique key on events was (tenant_id, dedup_key), while every lookup runs for one
member: a second member sending the same platform id hit the key and found no event of
their own. Now the key is (agent_id, dedup_key): each member's redeliveries are stored
once, and two members never share an event.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None
rewrites_tables = True  # rebuilds the events' unique key over every event


def upgrade() -> None:
    op.drop_constraint("events_tenant_id_dedup_key_key", "events", type_="unique")
    op.create_unique_constraint(
        "events_agent_id_dedup_key_key", "events", ["agent_id", "dedup_key"]
    )


def downgrade() -> None:
    op.drop_constraint("events_agent_id_dedup_key_key", "events", type_="unique")
    op.create_unique_constraint(
        "events_tenant_id_dedup_key_key", "events", ["tenant_id", "dedup_key"]
    )
