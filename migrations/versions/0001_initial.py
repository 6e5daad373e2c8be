"""Initial schema: tenants, users, agents, blocks, messages, summaries, passages, events, outbox.

The embedding dimension comes from the migration context (`embedding_dim`, from
COMPANION_EMBEDDING_DIM) and is recorded in `meta`, so the HNSW index can exist.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import context, op
from pgvector.sqlalchemy import Vector
from sqlalchemy.dialects.postgresql import JSONB, TSVECTOR

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def _id() -> sa.Column:
    return sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True)


def _tenant() -> sa.Column:
    return sa.Column(
        "tenant_id", sa.BigInteger, sa.ForeignKey("tenants.id", ondelete="CASCADE"), nullable=False
    )


def _agent(primary_key: bool = False) -> sa.Column:
    return sa.Column(
        "agent_id",
        sa.BigInteger,
        sa.ForeignKey("agents.id", ondelete="CASCADE"),
        nullable=False,
        primary_key=primary_key,
    )


def upgrade() -> None:
    dim = int(context.config.attributes.get("embedding_dim", 1536))
    op.execute("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public")
    op.create_table(
        "meta", sa.Column("key", sa.String, primary_key=True), sa.Column("value", sa.Text)
    )
    op.bulk_insert(
        sa.table("meta", sa.column("key"), sa.column("value")),
        [{"key": "embedding_dim", "value": str(dim)}],
    )
    op.create_table(
        "tenants",
        _id(),
        sa.Column("key", sa.String, nullable=False, unique=True),
        sa.Column("settings", JSONB, nullable=False, server_default="{}"),
        sa.Column("created_at", TS, nullable=False, server_default=sa.func.now()),
    )
    op.create_table(
        "users",
        _id(),
        _tenant(),
        sa.Column("external_id", sa.String, nullable=False),
        sa.Column("display_name", sa.String),
        sa.Column("timezone", sa.String, nullable=False, server_default="UTC"),
        sa.Column("created_at", TS, nullable=False, server_default=sa.func.now()),
        sa.UniqueConstraint("tenant_id", "external_id"),
    )
    op.create_table(
        "agents",
        _id(),
        _tenant(),
        sa.Column(
            "user_id",
            sa.BigInteger,
            sa.ForeignKey("users.id", ondelete="CASCADE"),
            nullable=False,
            unique=True,
        ),
        sa.Column("pressure_warned", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("created_at", TS, nullable=False, server_default=sa.func.now()),
        sa.Column("last_active_at", TS),
    )
    op.create_index("agents_tenant", "agents", ["tenant_id"])
    op.create_table(
        "blocks",
        _agent(primary_key=True),
        sa.Column("label", sa.String, primary_key=True),
        _tenant(),
        sa.Column("value", sa.Text, nullable=False, server_default=""),
        sa.Column("char_limit", sa.Integer, nullable=False),
        sa.Column("updated_at", TS, nullable=False, server_default=sa.func.now()),
    )
    op.create_table(
        "messages",
        _id(),
        _tenant(),
        _agent(),
        sa.Column("event_id", sa.BigInteger),
        sa.Column("role", sa.String, nullable=False),
        sa.Column("content", sa.Text),
        sa.Column("tool_calls", JSONB),
        sa.Column("tool_call_id", sa.String),
        sa.Column("search_text", sa.Text),
        sa.Column(
            "tsv",
            TSVECTOR,
            sa.Computed("to_tsvector('english', coalesce(search_text, ''))", persisted=True),
        ),
        sa.Column("tokens", sa.Integer, nullable=False, server_default="0"),
        sa.Column("in_context", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_index("messages_agent", "messages", ["agent_id", "id"])
    op.create_index(
        "messages_in_context", "messages", ["agent_id", "id"], postgresql_where="in_context"
    )
    op.create_index("messages_agent_time", "messages", ["agent_id", "created_at"])
    op.create_index("messages_tsv", "messages", ["tsv"], postgresql_using="gin")
    op.create_table(
        "summaries",
        _id(),
        _tenant(),
        _agent(),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("covers_messages", sa.Integer, nullable=False),
        sa.Column("tokens", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_index("summaries_agent", "summaries", ["agent_id", "id"])
    op.create_table(
        "passages",
        _id(),
        _tenant(),
        _agent(),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("source", sa.String),
        sa.Column("embedding", Vector(dim)),
        sa.Column("tsv", TSVECTOR, sa.Computed("to_tsvector('english', text)", persisted=True)),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_index("passages_agent", "passages", ["agent_id", "id"])
    op.create_index("passages_tsv", "passages", ["tsv"], postgresql_using="gin")
    # Full precision: HNSW takes up to 2,000 numbers (0020 indexes halfvec copies).
    if dim <= 2000:
        op.create_index(
            "passages_embedding",
            "passages",
            ["embedding"],
            postgresql_using="hnsw",
            postgresql_ops={"embedding": "vector_cosine_ops"},
        )
    op.create_table(
        "events",
        _id(),
        _tenant(),
        _agent(),
        sa.Column("kind", sa.String, nullable=False),
        sa.Column("payload", JSONB, nullable=False),
        sa.Column("dedup_key", sa.String),
        sa.Column("status", sa.String, nullable=False, server_default="pending"),
        sa.Column("error", sa.Text),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("processed_at", TS),
        sa.UniqueConstraint("tenant_id", "dedup_key"),
    )
    op.create_index(
        "events_pending", "events", ["agent_id", "id"], postgresql_where="status = 'pending'"
    )
    op.create_table(
        "outbox",
        _id(),
        _tenant(),
        _agent(),
        sa.Column("event_id", sa.BigInteger),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("delivered_at", TS),
    )
    op.create_index("outbox_event", "outbox", ["event_id"])
    op.create_index(
        "outbox_undelivered", "outbox", ["agent_id", "id"], postgresql_where="delivered_at IS NULL"
    )


def downgrade() -> None:
    for table in (
        "outbox",
        "events",
        "passages",
        "summaries",
        "messages",
        "blocks",
        "agents",
        "users",
        "tenants",
        "meta",
    ):
        op.drop_table(table)
