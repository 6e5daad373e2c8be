"""Only searchable messages have a row in `message_vectors`.

Companion writes a vector row only with a searchable message (`terms.counted_insert`), but
0018 also moved the vector of any message that had one without being searchable. Those
rows go, so that the search for nearest messages reads `message_vectors` alone: it joined
each candidate back to `messages` to check, and for a member whose vectors are found by an
exact scan (a smaller member among many, whose vectors the HNSW index does not serve) that
join took more than half the time (277 -> 116 ms per 100,000 vectors; bench/README.md).

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-02
"""

from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "DELETE FROM message_vectors v USING messages m "
        "WHERE m.tenant_id = v.tenant_id AND m.id = v.message_id AND m.search_text IS NULL"
    )


def downgrade() -> None:
    pass  # the vectors of unsearchable messages were never searched
