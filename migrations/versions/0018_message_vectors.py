"""Message vectors live beside the messages, in `message_vectors`, not in the messages heap.

A 384-dimension vector made each message row about 2 KB, just under the size at which
Postgres moves a value out of line, so every search by key words read about ten times the
blocks its text needs. Now:

    message_vectors (tenant_id, agent_id, message_id, embedding)
        primary key      (tenant_id, message_id): one row per searchable message
        foreign keys     (tenant_id, message_id) -> messages (tenant_id, id) and
                         (tenant_id, agent_id) -> agents (tenant_id, id), ON DELETE CASCADE:
                         a message's vector goes whenever the message goes (forget, reset,
                         import --replace, tenant erase, eval's forget_exchanges)
        embedding NULL   the message waits for the embedding worker (`message_vectors_missing`
                         finds those rows); the row is stored with the message
        indexes          `message_vectors_embedding` (HNSW, cosine), `message_vectors_missing`
        wall             the member policy of 0009, FORCE ROW LEVEL SECURITY

The upgrade copies every vector across (and makes a waiting row for every searchable
message without one), drops `messages.embedding` with its indexes, and rewrites `messages`
(CLUSTER on its primary key, under an exclusive lock) so the space is given back: expect it
to take about as long as a VACUUM FULL of `messages` plus an HNSW build of its vectors.
The downgrade puts the vectors back into `messages.embedding`.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None
rewrites_tables = True  # moves every message's vector into message_vectors

AGENT = "NULLIF(current_setting('companion.agent_id', true), '')::bigint"
TENANT = "NULLIF(current_setting('companion.tenant_id', true), '')::bigint"
SCOPE = f"{AGENT} IS NULL OR (tenant_id = {TENANT} AND agent_id = {AGENT})"  # as 0009


def _dim() -> int:
    return int(op.get_bind().scalar(sa.text("SELECT value FROM meta WHERE key = 'embedding_dim'")))


def upgrade() -> None:
    op.execute(
        f"""
        CREATE TABLE message_vectors (
            tenant_id bigint NOT NULL,
            agent_id bigint NOT NULL,
            message_id bigint NOT NULL,
            embedding vector({_dim()}),
            CONSTRAINT message_vectors_pkey PRIMARY KEY (tenant_id, message_id),
            CONSTRAINT message_vectors_message_id_fkey FOREIGN KEY (tenant_id, message_id)
                REFERENCES messages (tenant_id, id) ON DELETE CASCADE,
            CONSTRAINT message_vectors_agent_id_fkey FOREIGN KEY (tenant_id, agent_id)
                REFERENCES agents (tenant_id, id) ON DELETE CASCADE
        )
        """
    )
    op.execute(
        "INSERT INTO message_vectors (tenant_id, agent_id, message_id, embedding) "
        "SELECT tenant_id, agent_id, id, embedding FROM messages "
        "WHERE search_text IS NOT NULL OR embedding IS NOT NULL ORDER BY id"
    )
    # Full precision: HNSW takes up to 2,000 numbers (0020 indexes halfvec copies).
    if _dim() <= 2000:
        op.execute(
            "CREATE INDEX message_vectors_embedding ON message_vectors "
            "USING hnsw (embedding vector_cosine_ops)"
        )
    op.execute(
        "CREATE INDEX message_vectors_missing ON message_vectors (message_id) "
        "WHERE embedding IS NULL"
    )
    op.execute(
        f"CREATE POLICY member_scope ON message_vectors USING ({SCOPE}) WITH CHECK ({SCOPE})"
    )
    op.execute("ALTER TABLE message_vectors ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE message_vectors FORCE ROW LEVEL SECURITY")
    _grant_member_role()
    op.execute("DROP INDEX IF EXISTS messages_embedding")
    op.execute("DROP INDEX messages_unembedded")
    op.execute("ALTER TABLE messages DROP COLUMN embedding")
    # A dropped column's values stay in every row until the row is written again.
    op.execute("CLUSTER messages USING messages_pkey")
    op.execute("ALTER TABLE messages SET WITHOUT CLUSTER")


def _grant_member_role() -> None:
    """What 0006 granted `companion_member` on the other member tables, where it exists."""
    op.execute(
        """
        DO $$
        BEGIN
            IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'companion_member') THEN
                EXECUTE 'GRANT SELECT, INSERT, UPDATE, DELETE ON message_vectors
                    TO companion_member';
            END IF;
        END $$;
        """
    )


def downgrade() -> None:
    op.execute(f"ALTER TABLE messages ADD COLUMN embedding vector({_dim()})")
    op.execute(
        "UPDATE messages m SET embedding = v.embedding FROM message_vectors v "
        "WHERE v.tenant_id = m.tenant_id AND v.message_id = m.id AND v.embedding IS NOT NULL"
    )
    op.execute("DROP TABLE message_vectors")
    op.execute(
        "CREATE INDEX messages_embedding ON messages USING hnsw (embedding vector_cosine_ops)"
    )
    op.execute(
        "CREATE INDEX messages_unembedded ON messages (id) "
        "WHERE embedding IS NULL AND search_text IS NOT NULL"
    )
