"""Passage vectors live beside the passages, in `passage_vectors`, as message vectors do (0018).

A 384-number vector made each passage row about 2.07 kB, past the 2 kB at which Postgres
moves a value out of line, so every vector sat in TOAST and a search that compares a member's
vectors one by one (a smaller member among many, whose passages the HNSW index does not
serve) read three blocks a passage: 47 ms for 20,000 passages (bench/README.md). Now:

    passage_vectors (tenant_id, agent_id, passage_id, embedding)
        primary key      (tenant_id, passage_id): one row per passage
        foreign keys     (tenant_id, passage_id) -> passages (tenant_id, id) and
                         (tenant_id, agent_id) -> agents (tenant_id, id), ON DELETE CASCADE
        embedding NULL   the passage waits for the embedding worker
        indexes          `passage_vectors_embedding` (HNSW over half precision, cosine),
                         `passage_vectors_missing`, `passage_vectors_agent` (tenant, agent)
        wall             the member policy of 0009, FORCE ROW LEVEL SECURITY

The upgrade copies every vector across (a waiting row for a passage without one), drops
`passages.embedding` with its indexes and rewrites `passages` (CLUSTER on its primary key,
under an exclusive lock) so the space is given back. The downgrade puts the vectors back.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None
rewrites_tables = True  # moves every passage's vector into passage_vectors

AGENT = "NULLIF(current_setting('companion.agent_id', true), '')::bigint"
TENANT = "NULLIF(current_setting('companion.tenant_id', true), '')::bigint"
SCOPE = f"{AGENT} IS NULL OR (tenant_id = {TENANT} AND agent_id = {AGENT})"  # as 0009


def _dim() -> int:
    return int(op.get_bind().scalar(sa.text("SELECT value FROM meta WHERE key = 'embedding_dim'")))


def upgrade() -> None:
    dim = _dim()
    op.execute(
        f"""
        CREATE TABLE passage_vectors (
            tenant_id bigint NOT NULL,
            agent_id bigint NOT NULL,
            passage_id bigint NOT NULL,
            embedding vector({dim}),
            CONSTRAINT passage_vectors_pkey PRIMARY KEY (tenant_id, passage_id),
            CONSTRAINT passage_vectors_passage_id_fkey FOREIGN KEY (tenant_id, passage_id)
                REFERENCES passages (tenant_id, id) ON DELETE CASCADE,
            CONSTRAINT passage_vectors_agent_id_fkey FOREIGN KEY (tenant_id, agent_id)
                REFERENCES agents (tenant_id, id) ON DELETE CASCADE
        )
        """
    )
    op.execute(
        "INSERT INTO passage_vectors (tenant_id, agent_id, passage_id, embedding) "
        "SELECT tenant_id, agent_id, id, embedding FROM passages ORDER BY id"
    )
    op.execute(
        "CREATE INDEX passage_vectors_embedding ON passage_vectors "
        f"USING hnsw ((embedding::halfvec({dim})) halfvec_cosine_ops)"
    )
    op.execute(
        "CREATE INDEX passage_vectors_missing ON passage_vectors (passage_id) "
        "WHERE embedding IS NULL"
    )
    op.execute("CREATE INDEX passage_vectors_agent ON passage_vectors (tenant_id, agent_id)")
    op.execute(
        f"CREATE POLICY member_scope ON passage_vectors USING ({SCOPE}) WITH CHECK ({SCOPE})"
    )
    op.execute("ALTER TABLE passage_vectors ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE passage_vectors FORCE ROW LEVEL SECURITY")
    op.execute(
        """
        DO $$
        BEGIN
            IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'companion_member') THEN
                EXECUTE 'GRANT SELECT, INSERT, UPDATE, DELETE ON passage_vectors
                    TO companion_member';
            END IF;
        END $$;
        """
    )
    op.execute("DROP INDEX IF EXISTS passages_embedding")
    op.execute("DROP INDEX IF EXISTS passages_unembedded")
    op.execute("ALTER TABLE passages DROP COLUMN embedding")
    # An interrupted `companion reembed --dim` left its side column here: the next run starts
    # it again on passage_vectors.
    op.execute("ALTER TABLE passages DROP COLUMN IF EXISTS embedding_next")
    # A dropped column's values stay in every row (and in TOAST) until the row is written again.
    op.execute("CLUSTER passages USING passages_pkey")
    op.execute("ALTER TABLE passages SET WITHOUT CLUSTER")
    # Statistics now, not when autovacuum comes by: without them the planner takes a member's
    # 100,000 vectors for one row and sorts them all (107 ms instead of 10 for archival search).
    op.execute("ANALYZE passage_vectors")


def downgrade() -> None:
    dim = _dim()
    op.execute(f"ALTER TABLE passages ADD COLUMN embedding vector({dim})")
    op.execute(
        "UPDATE passages p SET embedding = v.embedding FROM passage_vectors v "
        "WHERE v.tenant_id = p.tenant_id AND v.passage_id = p.id AND v.embedding IS NOT NULL"
    )
    op.execute("DROP TABLE passage_vectors")
    op.execute(
        "CREATE INDEX passages_embedding ON passages "
        f"USING hnsw ((embedding::halfvec({dim})) halfvec_cosine_ops)"
    )
    op.execute("CREATE INDEX passages_unembedded ON passages (id) WHERE embedding IS NULL")
