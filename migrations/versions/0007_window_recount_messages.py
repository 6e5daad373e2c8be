"""Count the messages that entered the FIFO queue uncounted.

Before every path counted what it stored, a message kept without a turn (rate-limited,
over the daily budget, a model failure) entered the queue with tokens = 0, and enough of
them made a prompt far larger than the window. Each such message is counted here with the
engine's own counter, as the prompt shows it but uncut: this migration does not know the
deployment's window, and a count too high only makes the next flush come sooner (the next
turn recounts every queued message for the window in use).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from core.memory.prompt import message_tokens

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

BATCH = 1000
UNCUT = 10**12  # a message's whole text

messages = sa.table(
    "messages",
    sa.column("id", sa.BigInteger),
    sa.column("role", sa.String),
    sa.column("content", sa.Text),
    sa.column("tool_calls", JSONB),
    sa.column("tool_call_id", sa.String),
    sa.column("tokens", sa.Integer),
    sa.column("in_context", sa.Boolean),
)


def upgrade() -> None:
    bind = op.get_bind()
    last = 0
    while True:
        rows = bind.execute(
            sa.select(messages)
            .where(messages.c.in_context, messages.c.tokens == 0, messages.c.id > last)
            .order_by(messages.c.id)
            .limit(BATCH)
        ).all()
        if not rows:
            return
        counted = [{"key": row.id, "counted": message_tokens(row, UNCUT)} for row in rows]
        bind.execute(
            messages.update()
            .where(messages.c.id == sa.bindparam("key"))
            .values(tokens=sa.bindparam("counted")),
            counted,
        )
        last = rows[-1].id


def downgrade() -> None:
    pass  # the counts are right under any revision
