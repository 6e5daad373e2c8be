"""Vectors are stored in half precision, in the row: `embedding halfvec(N)`, storage MAIN.

    message_vectors.embedding   halfvec(N), kept in the row (not in TOAST)
    passage_vectors.embedding   the same
    message_vectors_embedding   hnsw (embedding halfvec_cosine_ops)
    passage_vectors_embedding   the same

Since 0020 every comparison was already in half precision (the indexes held halfvec copies
and searches ordered by `embedding::halfvec(N)`), so what a search finds does not change.
What changes is what a search that compares a member's vectors one by one reads (a member
whose rows the HNSW index does not serve well, among many): a 1536-number vector was 6 kB
in full precision, stored out of line in TOAST, and cast for every comparison. Measured on
30,000 vectors of 1536 numbers (bench/README.md, "1536 dimensions"): 142 ms as stored
before, 31 ms as stored now; and the tables are half the size. A vector of up to about
4,000 numbers fits in the row (MAIN keeps a value in line while the row fits a page).

The upgrade rewrites both tables and rebuilds their indexes (minutes for millions of
vectors; writes to the two tables wait meanwhile). The downgrade gives full precision back
(the numbers stay those of half precision).

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None
rewrites_tables = True  # rewrites both vector tables in half precision

TABLES = (
    ("message_vectors", "message_vectors_embedding"),
    ("passage_vectors", "passage_vectors_embedding"),
)


def _dim() -> int:
    return int(op.get_bind().scalar(sa.text("SELECT value FROM meta WHERE key = 'embedding_dim'")))


def upgrade() -> None:
    dim = _dim()
    for table, index in TABLES:
        op.execute(f"DROP INDEX IF EXISTS {index}")
        # One statement, one rewrite: the rows are written with the new type and storage.
        op.execute(
            f"ALTER TABLE {table} "
            f"ALTER COLUMN embedding TYPE halfvec({dim}) USING embedding::halfvec({dim}), "
            "ALTER COLUMN embedding SET STORAGE MAIN"
        )
        op.execute(f"CREATE INDEX {index} ON {table} USING hnsw (embedding halfvec_cosine_ops)")
        op.execute(f"ANALYZE {table}")


def downgrade() -> None:
    dim = _dim()
    for table, index in TABLES:
        op.execute(f"DROP INDEX IF EXISTS {index}")
        op.execute(
            f"ALTER TABLE {table} "
            f"ALTER COLUMN embedding TYPE vector({dim}) USING embedding::vector({dim})"
        )
        op.execute(
            f"CREATE INDEX {index} ON {table} "
            f"USING hnsw ((embedding::halfvec({dim})) halfvec_cosine_ops)"
        )
