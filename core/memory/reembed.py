"""Re-embedding archival and recall storage after the embedding model (or its size) changes.

    check_model(embedder, dim)           the model really returns `dim` dimensions, or an error
    reembed(sessions, embedder, ...)     every passage and message again (or those without one)
    change_dimension(sessions, embedder, dim)
                                         vectors of a new size, swapped in when all are ready
    adopt_dimension(sessions, dim)       a new size at once, for a database holding no vectors
    held_model(sessions), record_model(sessions, name)
                                         which model made the stored vectors (`meta`)

An operator command, not an agent action. Nothing is destroyed on a guess: the model is
asked first, and a new dimension is filled into a side column while the old vectors and
their index keep serving searches; the swap (column, HNSW index, `meta`) is one
transaction at the end. An interrupted run leaves the side column behind and the next run
continues it, if it embeds with the same model (`meta` notes which model fills the side
column; another model starts it afresh). Switching to another model of the same size goes
the same way (the side column, swapped at the end): until then the old model's vectors
serve searches, never a mix of two models' vectors, which would compare numbers from two
different spaces. Vectors are beside their rows, in `passage_vectors` and `message_vectors`
(`KINDS`).
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.errors import ConfigError, EmbeddingError, WrongDimension
from core.memory.embeddings import (
    MESSAGE_VECTORS,
    PASSAGE_VECTORS,
    Vectors,
    stored,
    texts,
)
from core.ports import Embedder, Progress

SIDE_COLUMN = "embedding_next"
MODEL_KEY = "embedding_model"  # in `meta`: the model that made the stored vectors
NEXT_MODEL_KEY = "embedding_next_model"  # in `meta`: the model filling SIDE_COLUMN
KINDS = (PASSAGE_VECTORS, MESSAGE_VECTORS)  # re-embedded in this order


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


async def held_model(sessions: async_sessionmaker[AsyncSession]) -> str | None:
    """The model that made the stored vectors, as recorded (None: not recorded yet)."""
    async with sessions() as session:
        value = await session.scalar(
            text("SELECT value FROM meta WHERE key = :key"), {"key": MODEL_KEY}
        )
    return None if value is None else str(value)


async def record_model(sessions: async_sessionmaker[AsyncSession], model: str) -> None:
    async with sessions() as session, session.begin():
        await _record_model(session, model)


async def _record_model(session: AsyncSession, model: str, key: str = MODEL_KEY) -> None:
    await session.execute(
        text(
            "INSERT INTO meta (key, value) VALUES (:key, :model) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
        ),
        {"key": key, "model": model},
    )


async def _count(sessions: async_sessionmaker[AsyncSession], where: str) -> int:
    total = 0
    async with sessions() as session:
        for kind in KINDS:
            total += int(
                await session.scalar(text(f"SELECT count(*) FROM {kind.table} v WHERE {where}"))
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
    total = await _count(sessions, where)
    done = 0
    progress(0, total)
    for kind in KINDS:
        last_id = 0
        while True:
            async with sessions() as session, session.begin():
                rows = (
                    await session.execute(text(kind.batch(where)), {"last": last_id, "n": batch})
                ).all()
                if not rows:
                    break
                vectors = await embedder.embed(texts(rows))
                await session.execute(text(kind.store(column)), stored(rows, vectors))
            done += len(rows)
            last_id = rows[-1].id
            progress(done, total)
    return done


async def reembed(
    sessions: async_sessionmaker[AsyncSession],
    embedder: Embedder,
    only_missing: bool = False,
    batch: int = 64,
    progress: Progress = _quiet,
    model: str | None = None,
) -> int:
    """Embed every passage and message again (or those without a vector); returns how many.
    `model` is recorded as the one that made them (all of them only: not with only_missing)."""
    where = "v.embedding IS NULL" if only_missing else "TRUE"
    total = await _count(sessions, where)
    if only_missing and not total:
        return 0  # nothing to embed: the model is not even loaded (a second or more)
    progress(0, total)  # said before the model loads
    await check_model(embedder, await held_dimension(sessions))
    count = await _fill(sessions, embedder, "embedding", where, batch, progress)
    if model is not None and not only_missing:
        await record_model(sessions, model)
    return count


async def change_dimension(
    sessions: async_sessionmaker[AsyncSession],
    embedder: Embedder,
    dim: int,
    batch: int = 64,
    progress: Progress = _quiet,
    model: str | None = None,
) -> int:
    """Give every passage and message a `dim`-dimension vector, then swap them in (and
    record `model` as the one that made them). Also how a model of the same size replaces
    another: the old vectors serve until the swap."""
    await check_model(embedder, dim)
    async with sessions() as session, session.begin():
        filled_by = await session.scalar(
            text("SELECT value FROM meta WHERE key = :key"), {"key": NEXT_MODEL_KEY}
        )
        for kind in KINDS:  # an interrupted run's vectors are kept only if from this model
            await _side_column(session, kind.table, dim, keep=(filled_by or "") == (model or ""))
        await _record_model(session, model or "", NEXT_MODEL_KEY)
    missing = f"v.{SIDE_COLUMN} IS NULL"
    count = await _fill(sessions, embedder, SIDE_COLUMN, missing, batch, progress)
    async with sessions() as session, session.begin():
        for kind in KINDS:
            await session.execute(text(f"LOCK TABLE {kind.table} IN SHARE ROW EXCLUSIVE MODE"))
            rows = (  # rows stored meanwhile: embed them under the lock, then swap
                await session.execute(
                    text(
                        f"SELECT v.{kind.key} AS id, v.tenant_id, {kind.text} AS text "
                        f"FROM {kind.rows} WHERE {missing}"
                    )
                )
            ).all()
            if rows:
                vectors = await embedder.embed(texts(rows))
                await session.execute(text(kind.store(SIDE_COLUMN)), stored(rows, vectors))
                count += len(rows)
        for kind in KINDS:
            await _swap(session, kind, dim)
        await _record(session, dim)
        if model is not None:
            await _record_model(session, model)
        await session.execute(text("DELETE FROM meta WHERE key = :key"), {"key": NEXT_MODEL_KEY})
    return count


async def adopt_dimension(sessions: async_sessionmaker[AsyncSession], dim: int) -> bool:
    """Switch to `dim` at once when no vector is stored (nothing to redo); False otherwise.

    A database created for another embedder that never stored a vector (for example one
    used without embeddings before the local embedder existed) can take the new size
    without a re-embedding run: the rows get vectors from the embedding worker afterwards.
    """
    async with sessions() as session, session.begin():
        for kind in KINDS:
            await session.execute(text(f"LOCK TABLE {kind.table} IN SHARE ROW EXCLUSIVE MODE"))
            if await session.scalar(
                text(f"SELECT EXISTS (SELECT 1 FROM {kind.table} WHERE embedding IS NOT NULL)")
            ):
                return False
        for kind in KINDS:
            await _side_column(session, kind.table, dim, keep=False)
            await _swap(session, kind, dim)
        await _record(session, dim)
        await session.execute(text("DELETE FROM meta WHERE key = :key"), {"key": NEXT_MODEL_KEY})
    return True


async def _side_column(session: AsyncSession, table: str, dim: int, keep: bool = True) -> None:
    """An empty `embedding_next` of `dim` numbers, unless one is there (an interrupted run)
    and `keep` (its vectors come from the model embedding now)."""
    side = await session.scalar(
        text(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = CAST(:table AS regclass) AND attname = :name AND NOT attisdropped"
        ),
        {"table": table, "name": SIDE_COLUMN},
    )
    if not keep or side != f"halfvec({dim})":  # absent, or left by another model or size
        await session.execute(text(f"ALTER TABLE {table} DROP COLUMN IF EXISTS {SIDE_COLUMN}"))
        await session.execute(
            text(f"ALTER TABLE {table} ADD COLUMN {SIDE_COLUMN} halfvec({int(dim)})")
        )
        # In the row, as migration 0027 keeps `embedding` (the rename keeps it so).
        await session.execute(
            text(f"ALTER TABLE {table} ALTER COLUMN {SIDE_COLUMN} SET STORAGE MAIN")
        )


async def _swap(session: AsyncSession, kind: Vectors, dim: int) -> None:
    table = kind.table
    for statement in (
        f"DROP INDEX IF EXISTS {kind.index}",
        f"ALTER TABLE {table} DROP COLUMN embedding",  # the partial index goes with it
        f"ALTER TABLE {table} RENAME COLUMN {SIDE_COLUMN} TO embedding",
        # As migration 0027 makes it, over the half-precision column.
        f"CREATE INDEX {kind.index} ON {table} USING hnsw (embedding halfvec_cosine_ops)",
        f"CREATE INDEX IF NOT EXISTS {kind.missing} ON {table} ({kind.key}) "
        "WHERE embedding IS NULL",
    ):
        await session.execute(text(statement))


async def _record(session: AsyncSession, dim: int) -> None:
    await session.execute(
        text("UPDATE meta SET value = :dim WHERE key = 'embedding_dim'"), {"dim": str(dim)}
    )
