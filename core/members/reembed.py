"""Re-embedding archival storage after the embedding model (or its dimension) changes.

An operator command, not an agent action: it walks every passage of every agent in batches.
Changing the dimension rebuilds the column and its HNSW index first.
"""

from __future__ import annotations

from sqlalchemy import select, text, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.models import Passage
from core.ports import Embedder


async def set_dimension(sessions: async_sessionmaker[AsyncSession], dim: int) -> None:
    async with sessions() as session, session.begin():
        await session.execute(text("DROP INDEX IF EXISTS passages_embedding"))
        await session.execute(
            text(f"ALTER TABLE passages ALTER COLUMN embedding TYPE vector({int(dim)}) USING NULL")
        )
        await session.execute(
            text(
                "CREATE INDEX passages_embedding ON passages "
                "USING hnsw (embedding vector_cosine_ops)"
            )
        )
        await session.execute(
            text("UPDATE meta SET value = :dim WHERE key = 'embedding_dim'"), {"dim": str(dim)}
        )


async def reembed(
    sessions: async_sessionmaker[AsyncSession],
    embedder: Embedder,
    only_missing: bool = False,
    batch: int = 64,
) -> int:
    """Embed every passage again (or only those without a vector); returns how many."""
    done, last_id = 0, 0
    while True:
        async with sessions() as session, session.begin():
            query = select(Passage.id, Passage.text).where(Passage.id > last_id)
            if only_missing:
                query = query.where(Passage.embedding.is_(None))
            rows = (await session.execute(query.order_by(Passage.id).limit(batch))).all()
            if not rows:
                return done
            vectors = await embedder.embed([row.text for row in rows])
            for row, vector in zip(rows, vectors, strict=True):
                await session.execute(
                    update(Passage).where(Passage.id == row.id).values(embedding=vector)
                )
            done += len(rows)
            last_id = rows[-1].id
