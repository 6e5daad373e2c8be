"""Message embeddings: recall storage searched by meaning as well as by key words.

`messages.embedding` has the dimension recorded in `meta` (the one `passages.embedding`
has), with an HNSW index for cosine distance. Rows start without a vector: the engine's
embedding worker fills them after their turn commits, and the partial indexes on rows still
waiting (messages and passages) keep that catch-up cheap. `messages_agent_order` finds
the turns next to a hit and counts an agent's searchable messages (an index-only scan).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None
rewrites_tables = True  # builds vector and order indexes over every message and passage


def upgrade() -> None:
    dim = int(op.get_bind().scalar(sa.text("SELECT value FROM meta WHERE key = 'embedding_dim'")))
    op.execute(f"ALTER TABLE messages ADD COLUMN embedding vector({dim})")
    # Full precision: HNSW takes up to 2,000 numbers (0020 indexes halfvec copies).
    if dim <= 2000:
        op.execute(
            "CREATE INDEX messages_embedding ON messages USING hnsw (embedding vector_cosine_ops)"
        )
    op.execute(
        "CREATE INDEX messages_unembedded ON messages (id) "
        "WHERE embedding IS NULL AND search_text IS NOT NULL"
    )
    op.execute("CREATE INDEX passages_unembedded ON passages (id) WHERE embedding IS NULL")
    # The turns next to a hit, found in one short index scan each (core.memory.search).
    op.execute(
        "CREATE INDEX messages_agent_order ON messages (tenant_id, agent_id, id) "
        "WHERE search_text IS NOT NULL"
    )
    # The same count for archival search (passages_agent lacks the tenant: heap visits).
    op.execute("CREATE INDEX passages_agent_order ON passages (tenant_id, agent_id, id)")


def downgrade() -> None:
    op.execute("DROP INDEX passages_agent_order")
    op.execute("DROP INDEX messages_agent_order")
    op.execute("DROP INDEX passages_unembedded")
    op.execute("DROP INDEX messages_unembedded")
    op.execute("DROP INDEX IF EXISTS messages_embedding")
    op.execute("ALTER TABLE messages DROP COLUMN embedding")
