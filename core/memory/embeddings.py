"""Vectors for messages and passages, filled in after the rows commit.

    query_vector(embedder, query)       a search's vector (in the query form where the model
                                        has one)
    closeness_of(embedder)              how near a vector-only hit must be to count, for its model
    embed_missing(sessions, embedder)   one pass: every message and passage without a vector
    EmbeddingWorker(sessions, embedder) runs passes in the background of the engine's process:
                                        at start (the catch-up; a terminal chat's after its
                                        first turn), when `wake()` is called after a turn
                                        commits, and every `interval` seconds
    MESSAGE_VECTORS, PASSAGE_VECTORS    where each kind keeps its vectors (`Vectors`): the
                                        statements that read a batch and store a vector,
                                        shared with `companion reembed`

A reply never waits for an embedding: the turn stores its messages without vectors (each
searchable one with an empty `message_vectors` row) and commits, and the worker embeds them
in batches afterwards; a passage whose vector could not be made when it was stored waits
the same way, in an empty `passage_vectors` row. A message is stored before any
vector exists, so a crash only delays its embedding (the next pass, in any process, finds
it); until then full text search finds it. One process embeds at a time (a Postgres
advisory lock); the others skip the pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.errors import EmbeddingError
from core.memory.ranking import Closeness
from core.ports import Embedder, QueryEmbedder
from core.stopping import cancel_within

log = logging.getLogger(__name__)

EMBED_CHARS = 4000  # the start of a very long text says enough about its meaning
WORKER_LOCK = 0x636F6D70656D62  # "compemb": one embedding pass at a time, across processes


def closeness_of(embedder: Embedder | None) -> Closeness:
    """The embedder's own `closeness` (floor, margin: its similarities' spread), else the
    default measured for MiniLM."""
    own = getattr(embedder, "closeness", None)
    return Closeness(*own) if isinstance(own, tuple) else own or Closeness()


async def query_vector(embedder: Embedder, query: str) -> list[float]:
    """The vector to search with: e5-like models embed a query unlike what they store."""
    if isinstance(embedder, QueryEmbedder):
        return await embedder.embed_query(query)
    return (await embedder.embed([query]))[0]


@dataclass(frozen=True)
class Vectors:
    """Where one kind of row keeps its vectors, beside the row (alias `v`; migrations 0018
    and 0026), and what is embedded for it."""

    table: str  # the table holding the `embedding` column
    key: str  # the row's id in that table
    rows: str  # FROM clause: the table as `v`, joined to where the text lives
    text: str  # the text embedded
    index: str  # the HNSW index on `embedding`
    missing: str  # the partial index on rows waiting for a vector

    def batch(self, where: str) -> str:
        """The next `:n` rows matching `where` after key `:last`, in key order: id,
        tenant_id, text."""
        return (
            f"SELECT v.{self.key} AS id, v.tenant_id, {self.text} AS text FROM {self.rows} "
            f"WHERE v.{self.key} > :last AND {where} ORDER BY v.{self.key} LIMIT :n"
        )

    def store(self, column: str = "embedding") -> str:
        """Sets `column` of one row (`stored` gives the parameters)."""
        return (
            f"UPDATE {self.table} SET {column} = CAST(:v AS halfvec) "
            f"WHERE tenant_id = :tenant AND {self.key} = :id"
        )


MESSAGE_VECTORS = Vectors(  # a searchable message's vector (migration 0018)
    "message_vectors",
    "message_id",
    "message_vectors v JOIN messages m ON m.tenant_id = v.tenant_id AND m.id = v.message_id",
    "m.search_text",
    "message_vectors_embedding",
    "message_vectors_missing",
)
PASSAGE_VECTORS = Vectors(  # a passage's vector (migration 0026)
    "passage_vectors",
    "passage_id",
    "passage_vectors v JOIN passages p ON p.tenant_id = v.tenant_id AND p.id = v.passage_id",
    "p.text",
    "passage_vectors_embedding",
    "passage_vectors_missing",
)


def texts(rows: Sequence[Any]) -> list[str]:
    """What is embedded for each row of a `batch`."""
    return [row.text[:EMBED_CHARS] for row in rows]


_DIGITS = "{:.9g}".format


def stored(rows: Sequence[Any], vectors: list[list[float]]) -> list[dict[str, Any]]:
    """The parameters of `store` for each row of a `batch` and its vector: 9 digits, all that
    a column of float4 keeps, written in half the CPU of Python's 17 (`repr`)."""
    return [
        {"id": row.id, "tenant": row.tenant_id, "v": f"[{','.join(map(_DIGITS, vector))}]"}
        for row, vector in zip(rows, vectors, strict=True)
    ]


async def embed_missing(
    sessions: async_sessionmaker[AsyncSession], embedder: Embedder, batch: int = 64
) -> int:
    """Embed every message and passage that has no vector yet; returns how many."""
    done = 0
    for kind in (MESSAGE_VECTORS, PASSAGE_VECTORS):  # what a turn searches first, first
        waiting = kind.batch("v.embedding IS NULL")
        store = kind.store() + " AND embedding IS NULL"  # a vector is never overwritten
        last_id = 0
        while True:
            async with sessions() as session:
                rows = (await session.execute(text(waiting), {"last": last_id, "n": batch})).all()
            if not rows:
                break
            # No transaction is open while the model works: turns never wait on these rows.
            vectors = await embedder.embed(texts(rows))
            async with sessions() as session, session.begin():
                await session.execute(text(store), stored(rows, vectors))
            done += len(rows)
            last_id = rows[-1].id
            if len(rows) < batch:  # that was all; a row committed since wakes another pass
                break
    return done


class EmbeddingWorker:
    """Background passes of `embed_missing`; enter it with `async with` to run it."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        embedder: Embedder,
        interval: float = 60.0,
        batch: int = 64,
        gather: float = 0.25,
    ) -> None:
        self.sessions = sessions
        self.embedder = embedder
        self.interval = interval
        self.batch = batch
        self.gather = gather
        self.embedded = 0  # since start, by this process
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._hurry = asyncio.Event()  # someone waits for the vectors: no gathering
        self._task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        """New rows were committed: embed them soon."""
        self._idle.clear()
        self._wake.set()

    async def settled(self) -> None:
        """Return once a pass has run with nothing asked of it since (for tests, eval, and a
        piped chat before it exits): the passes meanwhile gather nothing."""
        self._hurry.set()
        self.wake()
        await self._idle.wait()

    async def run_pass(self) -> int:
        """One pass, unless another process is running one; returns how many were embedded."""
        bind = self.sessions.kw["bind"]
        async with bind.connect() as connection:
            connection = await connection.execution_options(isolation_level="AUTOCOMMIT")
            locked = await connection.scalar(
                text("SELECT pg_try_advisory_lock(:k)"), {"k": WORKER_LOCK}
            )
            if not locked:
                return 0
            try:
                count = await embed_missing(self.sessions, self.embedder, self.batch)
            finally:
                await connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": WORKER_LOCK})
        self.embedded += count
        return count

    async def _loop(self, held: bool) -> None:
        if held:  # the first pass waits for the first wake-up (or the interval)
            await self._woken_or_interval()
        while True:
            self._wake.clear()
            count = 0
            try:
                count = await self.run_pass()
            except EmbeddingError as error:
                log.warning("embedding pass stopped, the next one retries: %s", error)
            except Exception:
                log.exception("embedding pass failed; the next one retries")
            if not self._wake.is_set():
                self._idle.set()
                self._hurry.clear()
            if 0 < count < self.batch:
                # Rows are coming: let the next pass gather a batch. A model costs far more
                # a text one at a time than in batches (MiniLM here: 6.8 ms a text alone,
                # 4.3 in eights), and a pass has statements of its own. Until its vector
                # exists a message is found by its words.
                with contextlib.suppress(TimeoutError):  # unless `settled` is waiting
                    async with asyncio.timeout(self.gather):
                        await self._hurry.wait()
            await self._woken_or_interval()

    async def _woken_or_interval(self) -> None:
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancellation
        # that arrives just as the wake-up does, and closing the app waited forever.
        try:
            async with asyncio.timeout(self.interval):
                await self._wake.wait()
        except TimeoutError:
            pass

    def start(self, held: bool = False) -> None:
        """Run the passes in a task of the running loop, until `__aexit__` cancels it: the
        first (the catch-up) at once, or, `held`, at the first `wake()` (or after
        `interval`), so that it does not compete with what the process does first (a
        chat's first turn: loading the model is most of a second of CPU)."""
        self._task = asyncio.create_task(self._loop(held), name="embedding-worker")

    async def __aenter__(self) -> EmbeddingWorker:
        self.start()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
        *rest: Any,
    ) -> None:
        if self._task is not None:  # a pass may be waiting on a database or an endpoint
            await cancel_within("the embedding worker", [self._task])
            self._task = None
