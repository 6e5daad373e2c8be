"""The vector indexes over half-precision copies of the vectors.

    message_vectors_embedding   hnsw ((embedding::halfvec(N)) halfvec_cosine_ops)
    passages_embedding          the same over passages

N is the stored vectors' dimension (meta.embedding_dim). The vectors themselves stay full
precision; only the index holds 16-bit numbers, half the bytes per vector. The reason is the
size limit: full-precision HNSW takes vectors of up to 2,000 numbers, so a model such as
text-embedding-3-large (3,072) could not be indexed, and a database made for it failed its
first migration; halfvec indexes take up to 4,000 (0001, 0012 and 0018 now make no
full-precision index past 2,000). Measured on the dev file of LoCoMo, recall is the same
(R@5 / R@25 70.3 / 86.9 all but adversarial, before and after), and at 100k messages the
100-neighbour search takes the same time (bench/README.md, "Half-precision indexes").
Searches order by the same expression (core.memory.search); a re-embedding run rebuilds the
indexes for its size (core.memory.reembed).

The upgrade rebuilds both indexes: minutes for millions of vectors, and writes to the two
tables wait meanwhile (stop the replicas while it runs, as for every migration).

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None
rewrites_tables = True  # rebuilds the vector indexes

INDEXES = (("message_vectors", "message_vectors_embedding"), ("passages", "passages_embedding"))


def _dim() -> int:
    return int(op.get_bind().scalar(sa.text("SELECT value FROM meta WHERE key = 'embedding_dim'")))


def upgrade() -> None:
    dim = _dim()
    for table, index in INDEXES:
        op.execute(f"DROP INDEX IF EXISTS {index}")
        op.execute(
            f"CREATE INDEX {index} ON {table} "
            f"USING hnsw ((embedding::halfvec({dim})) halfvec_cosine_ops)"
        )


def downgrade() -> None:
    for table, index in INDEXES:
        op.execute(f"DROP INDEX IF EXISTS {index}")
        op.execute(f"CREATE INDEX {index} ON {table} USING hnsw (embedding vector_cosine_ops)")
