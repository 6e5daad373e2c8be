"""A version on the agent row for the main context kept between turns.

`agents.context_version` moves on in every transaction that changes the agent's FIFO queue
or summary (`core.memory.store.AgentStore` is where they change), so a process that kept a
copy of the queue from an earlier turn knows whether it may use it. `agents.count_basis`
names how the queue's messages were counted (the rules and the cut for the window in use):
a turn recounts the queue only when it differs. Existing agents start without one, so each
is recounted once, at its next turn.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "agents", sa.Column("context_version", sa.BigInteger, nullable=False, server_default="0")
    )
    op.add_column("agents", sa.Column("count_basis", sa.String))


def downgrade() -> None:
    op.drop_column("agents", "count_basis")
    op.drop_column("agents", "context_version")
