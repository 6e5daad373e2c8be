"""Re-embedding archival and recall storage after the embedding model (or its size) changes.

    check_model(embedder, dim)           the model really returns `dim` dimensions, or an error
    reembed(sessions, embedder, ...)     every passage and message again (or those without one)
    change_dimension(sessions, embedder, dim)
                                         vectors of a new size, swapped in when all are ready
    adopt_dimension(sessions, dim)       a new size at once, for a database holding no vectors

An operator command, not an agent action. Nothing is destroyed on a guess: the model is
asked first, and a new dimension is filled into a side column while the old vectors and
their index keep serving searches; the swap (column, HNSW index, `meta`) is one
transaction at the end. An interrupted run leaves the side column behind and the next run
continues it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.errors import ConfigError, EmbeddingError, WrongDimension
from core.memory.embeddings import EMBED_CHARS
from core.ports import Embedder, Progress

SIDE_COLUMN = "embedding_next"
# table -> (the text embedded, the rows that have one, the HNSW index on `embedding`)
TABLES = {
    "passages": ("text", "TRUE", "passages_embedding"),
    "messages": ("search_text", "search_text IS NOT NULL", "messages_embedding"),
}


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


async def _count(sessions: async_sessionmaker[AsyncSession], column: str, where: str) -> int:
    total = 0
    async with sessions() as session:
        for table, (_, has_text, _) in TABLES.items():
            total += int(
                await session.scalar(
                    text(f"SELECT count(*) FROM {table} WHERE {has_text} AND {where}")
                )
                or 0
            )
    return total


async def _fill(
    sessions: async_sessionmaker[AsyncSession],
    embedder: Embedder,
    column: str,
    where: str,
    batch: int,
    progress: Progress,
) -> int:
    """Embed the passages, then the messages, matching `where` into `column`, in id order."""
    total = await _count(sessions, column, where)
    done = 0
    progress(0, total)
    for table, (source, has_text, _) in TABLES.items():
        last_id = 0
        while True:
            async with sessions() as session, session.begin():
                rows = (
                    await session.execute(
                        text(
                            f"SELECT id, {source} AS text FROM {table} WHERE id > :last "
                            f"AND {has_text} AND {where} ORDER BY id LIMIT :n"
                        ),
                        {"last": last_id, "n": batch},
                    )
                ).all()
                if not rows:
                    break
                await _store(session, table, column, rows, await embedder.embed(_texts(rows)))
            done += len(rows)
            last_id = rows[-1].id
            progress(done, total)
    return done


def _texts(rows: Sequence[Any]) -> list[str]:
    return [row.text[:EMBED_CHARS] for row in rows]


async def _store(
    session: AsyncSession, table: str, column: str, rows: Sequence[Any], vectors: list[list[float]]
) -> None:
    await session.execute(
        text(f"UPDATE {table} SET {column} = CAST(:v AS vector) WHERE id = :id"),
        [{"id": row.id, "v": str(list(v))} for row, v in zip(rows, vectors, strict=True)],
    )


async def reembed(
    sessions: async_sessionmaker[AsyncSession],
    embedder: Embedder,
    only_missing: bool = False,
    batch: int = 64,
    progress: Progress = _quiet,
) -> int:
    """Embed every passage and message again (or those without a vector); returns how many."""
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
    """Give every passage and message a `dim`-dimension vector, then swap them in."""
    await check_model(embedder, dim)
    async with sessions() as session, session.begin():
        for table in TABLES:
            await _side_column(session, table, dim)
    count = await _fill(sessions, embedder, SIDE_COLUMN, f"{SIDE_COLUMN} IS NULL", batch, progress)
    async with sessions() as session, session.begin():
        for table, (source, has_text, _) in TABLES.items():
            await session.execute(text(f"LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE"))
            rows = (  # rows stored meanwhile: embed them under the lock, then swap
                await session.execute(
                    text(
                        f"SELECT id, {source} AS text FROM {table} "
                        f"WHERE {SIDE_COLUMN} IS NULL AND {has_text}"
                    )
                )
            ).all()
            if rows:
                await _store(session, table, SIDE_COLUMN, rows, await embedder.embed(_texts(rows)))
                count += len(rows)
        for table in TABLES:
            await _swap(session, table)
        await _record(session, dim)
    return count


async def adopt_dimension(sessions: async_sessionmaker[AsyncSession], dim: int) -> bool:
    """Switch to `dim` at once when no vector is stored (nothing to redo); False otherwise.

    A database created for another embedder that never stored a vector (for example one
    used without embeddings before the local embedder existed) can take the new size
    without a re-embedding run: the rows get vectors from the embedding worker afterwards.
    """
    async with sessions() as session, session.begin():
        for table in TABLES:
            await session.execute(text(f"LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE"))
            if await session.scalar(
                text(f"SELECT EXISTS (SELECT 1 FROM {table} WHERE embedding IS NOT NULL)")
            ):
                return False
        for table in TABLES:
            await _side_column(session, table, dim)
            await _swap(session, table)
        await _record(session, dim)
    return True


async def _side_column(session: AsyncSession, table: str, dim: int) -> None:
    """An empty `embedding_next` of `dim` numbers, unless one is there (an interrupted run)."""
    side = await session.scalar(
        text(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = CAST(:table AS regclass) AND attname = :name AND NOT attisdropped"
        ),
        {"table": table, "name": SIDE_COLUMN},
    )
    if side != f"vector({dim})":  # absent, or left by a run for another size
        await session.execute(text(f"ALTER TABLE {table} DROP COLUMN IF EXISTS {SIDE_COLUMN}"))
        await session.execute(
            text(f"ALTER TABLE {table} ADD COLUMN {SIDE_COLUMN} vector({int(dim)})")
        )


async def _swap(session: AsyncSession, table: str) -> None:
    index = TABLES[table][2]
    for statement in (
        f"DROP INDEX IF EXISTS {index}",
        f"ALTER TABLE {table} DROP COLUMN embedding",
        f"ALTER TABLE {table} RENAME COLUMN {SIDE_COLUMN} TO embedding",
        f"CREATE INDEX {index} ON {table} USING hnsw (embedding vector_cosine_ops)",
    ):
        await session.execute(text(statement))
    if table == "messages":  # the partial index went with the old column
        await session.execute(
            text(
                "CREATE INDEX IF NOT EXISTS messages_unembedded ON messages (id) "
                "WHERE embedding IS NULL AND search_text IS NOT NULL"
            )
        )
    else:
        await session.execute(
            text(
                "CREATE INDEX IF NOT EXISTS passages_unembedded ON passages (id) "
                "WHERE embedding IS NULL"
            )
        )


async def _record(session: AsyncSession, dim: int) -> None:
    await session.execute(
        text("UPDATE meta SET value = :dim WHERE key = 'embedding_dim'"), {"dim": str(dim)}
    )
