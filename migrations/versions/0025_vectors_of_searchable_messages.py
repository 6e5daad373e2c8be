"""Only searchable messages have a row in `message_vectors`, which is indexed by agent.

Companion writes a vector row only with a searchable message (`terms.counted_insert`), but
0018 also moved the vector of any message that had one without being searchable. Those
rows go, so that the search for nearest messages reads `message_vectors` alone: it joined
each candidate back to `messages` to check, and for a member whose vectors are found by an
exact scan (a smaller member among many, whose vectors the HNSW index does not serve) that
join took more than half the time (bench/README.md).

`message_vectors_agent` (tenant_id, agent_id) serves that exact scan, and the cascade when
an agent is deleted (a reset, an erase, an import that replaces a member): without it every
deleted agent read the whole table (0.3-2.6 s per member at 400,000 vectors).

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-02
"""

from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None
rewrites_tables = True  # reads every message vector


def upgrade() -> None:
    op.execute(
        "DELETE FROM message_vectors v USING messages m "
        "WHERE m.tenant_id = v.tenant_id AND m.id = v.message_id AND m.search_text IS NULL"
    )
    op.execute("CREATE INDEX message_vectors_agent ON message_vectors (tenant_id, agent_id)")


def downgrade() -> None:
    op.execute("DROP INDEX message_vectors_agent")
    # the vectors of unsearchable messages were never searched: they are not put back
