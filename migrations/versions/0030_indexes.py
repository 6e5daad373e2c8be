"""Events found by their dedup key alone, and the few held for their files, by index.

    events_dedup_key   (dedup_key): whether a platform's message was stored, asked
                       without knowing whose it is (Discord's read-back after a new session,
                       Slack's "did this thread's first message call the bot")
    events_waiting     (created_at) WHERE status = 'waiting': the messages held while their
                       files come, released when stale (every 10 s in `companion run`) and
                       fetched again after a restart

The unique key (tenant_id, agent_id, dedup_key) cannot find a key without its member: each
such lookup walked the whole index (1,456 index searches, 263 ms for one key among 600,000
events), and the held messages were found by reading every event (508 ms; 3.8 s for one
platform's, by tenant). Measured in the note of issue 26 and ARCHITECTURE.md, Data.

Both are built CONCURRENTLY, outside the revision's transaction, so replicas still serving
go on writing events meanwhile: this revision does not rewrite a table, and any command
applies it. A build that was interrupted leaves an invalid index, dropped and built again.

Revision ID: 0030_indexes
Revises: 0029
Create Date: 2026-12-04
"""

from alembic import op
from sqlalchemy import text

revision = "0030_indexes"
down_revision = "0029"
branch_labels = None
depends_on = None

INDEXES = {
    "events_dedup_key": "ON events (dedup_key)",
    "events_waiting": "ON events (created_at) WHERE status = 'waiting'",
}


def upgrade() -> None:
    with op.get_context().autocommit_block():
        for name, definition in INDEXES.items():
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")  # an interrupted build
            op.execute(text(f"CREATE INDEX CONCURRENTLY {name} {definition}"))


def downgrade() -> None:
    with op.get_context().autocommit_block():
        for name in INDEXES:
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
