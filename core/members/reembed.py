"""Re-embedding archival storage after the embedding model (or its dimension) changes.

    check_model(embedder, dim)           the model really returns `dim` dimensions, or an error
    reembed(sessions, embedder, ...)     every passage again (or only those without a vector)
    change_dimension(sessions, embedder, dim)
                                         vectors of a new size, swapped in when all are ready

An operator command, not an agent action. Nothing is destroyed on a guess: the model is
asked first, and a new dimension is filled into a side column while the old vectors and
their index keep serving searches; the swap (column, HNSW index, `meta`) is one
transaction at the end. An interrupted run leaves the side column behind and the next run
continues it.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.errors import ConfigError, EmbeddingError, WrongDimension
from core.ports import Embedder, Progress

SIDE_COLUMN = "embedding_next"


def _quiet(done: int, total: int) -> None:
    pass


async def check_model(embedder: Embedder, dim: int) -> None:
    """Ask the model for one vector; raise a one-line error unless it has `dim` numbers."""
    try:
        vectors = await embedder.embed(["companion dimension check"])
        size = len(vectors[0]) if vectors else 0
    except WrongDimension as error:
        size = error.got
    except EmbeddingError as error:
        raise ConfigError(f"the embedding model failed, nothing was changed: {error}") from None
    if size != dim:
        raise ConfigError(
            f"the embedding model returns {size} dimensions, not {dim}; nothing was changed. "
            f"Set COMPANION_EMBEDDING_DIM={size} (and run `companion reembed --dim {size}`), "
            "or choose a model that gives the size you want"
        )


async def held_dimension(sessions: async_sessionmaker[AsyncSession]) -> int:
    async with sessions() as session:
        value = await session.scalar(text("SELECT value FROM meta WHERE key = 'embedding_dim'"))
    return int(value)


async def _fill(
    sessions: async_sessionmaker[AsyncSession],
    embedder: Embedder,
    column: str,
    where: str,
    batch: int,
    progress: Progress,
) -> int:
    """Embed the passages matching `where` into `column`, in id order, batch by batch."""
    async with sessions() as session:
        total = int(await session.scalar(text(f"SELECT count(*) FROM passages WHERE {where}")))
    done, last_id = 0, 0
    progress(0, total)
    while True:
        async with sessions() as session, session.begin():
            rows = (
                await session.execute(
                    text(
                        f"SELECT id, text FROM passages WHERE id > :last AND {where} "
                        "ORDER BY id LIMIT :n"
                    ),
                    {"last": last_id, "n": batch},
                )
            ).all()
            if not rows:
                return done
            vectors = await embedder.embed([row.text for row in rows])
            await session.execute(
                text(f"UPDATE passages SET {column} = CAST(:v AS vector) WHERE id = :id"),
                [{"id": row.id, "v": str(list(v))} for row, v in zip(rows, vectors, strict=True)],
            )
        done += len(rows)
        last_id = rows[-1].id
        progress(done, total)


async def reembed(
    sessions: async_sessionmaker[AsyncSession],
    embedder: Embedder,
    only_missing: bool = False,
    batch: int = 64,
    progress: Progress = _quiet,
) -> int:
    """Embed every passage again (or only those without a vector); returns how many."""
    await check_model(embedder, await held_dimension(sessions))
    where = "embedding IS NULL" if only_missing else "TRUE"
    return await _fill(sessions, embedder, "embedding", where, batch, progress)


async def change_dimension(
    sessions: async_sessionmaker[AsyncSession],
    embedder: Embedder,
    dim: int,
    batch: int = 64,
    progress: Progress = _quiet,
) -> int:
    """Give every passage a `dim`-dimension vector, then swap them in; returns how many."""
    await check_model(embedder, dim)
    async with sessions() as session, session.begin():
        side = await session.scalar(
            text(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = 'passages'::regclass AND attname = :name AND NOT attisdropped"
            ),
            {"name": SIDE_COLUMN},
        )
        if side != f"vector({dim})":  # absent, or left by a run for another size
            await session.execute(text(f"ALTER TABLE passages DROP COLUMN IF EXISTS {SIDE_COLUMN}"))
            await session.execute(
                text(f"ALTER TABLE passages ADD COLUMN {SIDE_COLUMN} vector({int(dim)})")
            )
    count = await _fill(sessions, embedder, SIDE_COLUMN, f"{SIDE_COLUMN} IS NULL", batch, progress)
    async with sessions() as session, session.begin():
        await session.execute(text("LOCK TABLE passages IN SHARE ROW EXCLUSIVE MODE"))
        missing = await session.scalar(
            text(f"SELECT count(*) FROM passages WHERE {SIDE_COLUMN} IS NULL")
        )
        if missing:  # passages stored meanwhile: embed them under the lock, then swap
            rows = (
                await session.execute(
                    text(f"SELECT id, text FROM passages WHERE {SIDE_COLUMN} IS NULL")
                )
            ).all()
            vectors = await embedder.embed([row.text for row in rows])
            await session.execute(
                text(f"UPDATE passages SET {SIDE_COLUMN} = CAST(:v AS vector) WHERE id = :id"),
                [{"id": row.id, "v": str(list(v))} for row, v in zip(rows, vectors, strict=True)],
            )
            count += len(rows)
        await _swap(session, dim)
    return count


async def _swap(session: AsyncSession, dim: int) -> None:
    for statement in (
        "DROP INDEX IF EXISTS passages_embedding",
        "ALTER TABLE passages DROP COLUMN embedding",
        f"ALTER TABLE passages RENAME COLUMN {SIDE_COLUMN} TO embedding",
        "CREATE INDEX passages_embedding ON passages USING hnsw (embedding vector_cosine_ops)",
    ):
        await session.execute(text(statement))
    await session.execute(
        text("UPDATE meta SET value = :dim WHERE key = 'embedding_dim'"), {"dim": str(dim)}
    )
