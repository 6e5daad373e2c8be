"""Every background worker and connection stops within a bound when a process exits.

Found (issue 28): a `companion chat` printed its replies and did not exit within 60 s, and a
`companion tick --now` ran past 120 s. What a process closes on its way out (the embedding
worker, the presence connection that holds its agents, the connection pool, the platforms'
and the model's clients, work left running) now gets core.stopping.STOP_SECONDS each, then
the exit goes on without it. Driven here with what really hangs: a worker that will not
take its cancellation, and a database whose server processes stopped answering (SIGSTOP).
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import text

import core.stopping
from bot.database import open_database
from core.memory.embeddings import EmbeddingWorker
from core.runtime.activity import Activity
from core.stopping import STOP_SECONDS
from tests.conftest import served_url

ENOUGH = STOP_SECONDS + 20  # a stop that takes longer than this did not stop: it hangs


@pytest.fixture(autouse=True)
def short_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each bounded stop here is waited out in full: half a second, not STOP_SECONDS, finds
    a stop that waits forever just as well (a hang still runs past ENOUGH)."""
    monkeypatch.setattr(core.stopping, "STOP_SECONDS", 0.5)


async def stops(closing) -> bool:
    """Whether `closing` finished at all (a hang is what this looks for, not a time)."""
    task = asyncio.ensure_future(closing)
    done, _ = await asyncio.wait([task], timeout=ENOUGH)
    return bool(done)


@contextmanager
def not_answering(pids: list[int]) -> Iterator[None]:
    """The database's server processes `pids` stop answering (a host that froze)."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


class Deaf:
    """Work that ignores its cancellation until the test is over, then lets itself be ended
    (left deaf, it would hold up the test session's own event loop when that closes)."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.over = False
        self.tasks: list[asyncio.Task[object]] = []

    async def forever(self) -> int:  # e.g. a library's cleanup waiting on a dead socket
        task = asyncio.current_task()
        assert task is not None
        self.tasks.append(task)
        while True:
            try:
                self.started.set()
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                if self.over:
                    raise

    async def end(self) -> None:
        self.over = True
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def test_the_embedding_worker_stops_though_its_pass_will_not():
    deaf = Deaf()
    worker = EmbeddingWorker(sessions=None, embedder=None, interval=60)  # type: ignore[arg-type]
    worker.run_pass = deaf.forever  # type: ignore[method-assign]
    await worker.__aenter__()
    await deaf.started.wait()
    try:
        assert await stops(worker.__aexit__(None, None, None)), "the exit waits for the worker"
    finally:
        await deaf.end()


async def test_work_left_running_is_given_up_though_it_will_not_end():
    activity, deaf = Activity(), Deaf()
    activity.start(deaf.forever(), "a turn that ignores its cancellation")
    await deaf.started.wait()
    try:
        assert await stops(activity.cancel()), "the shutdown waits for the turn forever"
    finally:
        await deaf.end()


async def test_the_pool_is_let_go_of_when_the_database_stopped_answering(pg_url, schema, tmp_path):
    database = open_database(served_url(pg_url, schema), Path(tmp_path), 16, schema)
    sessions, _ = await database.__aenter__()
    async with sessions() as session:
        pid = int(await session.scalar(text("SELECT pg_backend_pid()")))
    with not_answering([pid]):
        assert await stops(database.__aexit__(None, None, None)), "dispose waits forever"
