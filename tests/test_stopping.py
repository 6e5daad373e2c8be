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

from sqlalchemy import text

from bot.database import open_database
from core.memory.embeddings import EmbeddingWorker
from core.runtime.activity import Activity
from core.stopping import STOP_SECONDS
from tests.conftest import served_url

ENOUGH = STOP_SECONDS + 20  # a stop that takes longer than this did not stop: it hangs


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


async def test_the_embedding_worker_stops_though_its_pass_will_not():
    stuck = asyncio.Event()

    async def run_pass() -> int:  # e.g. a library's cleanup waiting on a dead socket
        while True:
            try:
                stuck.set()
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                continue

    worker = EmbeddingWorker(sessions=None, embedder=None, interval=60)  # type: ignore[arg-type]
    worker.run_pass = run_pass  # type: ignore[method-assign]
    await worker.__aenter__()
    await stuck.wait()
    assert await stops(worker.__aexit__(None, None, None)), "the app's exit waits for the worker"


async def test_work_left_running_is_given_up_though_it_will_not_end():
    activity = Activity()

    async def deaf() -> None:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue

    activity.start(deaf(), "a turn that ignores its cancellation")
    await asyncio.sleep(0)
    assert await stops(activity.cancel()), "the shutdown waits for the turn forever"


async def test_the_pool_is_let_go_of_when_the_database_stopped_answering(pg_url, schema, tmp_path):
    database = open_database(served_url(pg_url, schema), Path(tmp_path), 16, schema)
    sessions, _ = await database.__aenter__()
    async with sessions() as session:
        pid = int(await session.scalar(text("SELECT pg_backend_pid()")))
    with not_answering([pid]):
        assert await stops(database.__aexit__(None, None, None)), "dispose waits forever"
