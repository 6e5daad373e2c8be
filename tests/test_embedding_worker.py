"""The background embedding worker stops when the app closes, however close the last wake-up:
on Python 3.11 `asyncio.wait_for` swallowed a cancellation arriving just as the wake-up did,
and `companion chat` printed its replies and never exited."""

from __future__ import annotations

import asyncio

import pytest

from core.memory.embeddings import EmbeddingWorker


@pytest.mark.parametrize("turns", range(6), ids=lambda n: f"woken {n} loop turns before")
async def test_the_worker_stops_however_close_the_last_wake_up(turns):
    first_pass = asyncio.Event()

    async def run_pass() -> int:
        first_pass.set()
        return 0

    worker = EmbeddingWorker(sessions=None, embedder=None, interval=60)  # type: ignore[arg-type]
    worker.run_pass = run_pass  # type: ignore[method-assign]
    await worker.__aenter__()
    await first_pass.wait()  # the first pass, then it waits to be woken
    for _ in range(3):
        await asyncio.sleep(0)
    worker.wake()  # a turn just committed...
    for _ in range(turns):
        await asyncio.sleep(0)
    stopping = asyncio.ensure_future(worker.__aexit__(None, None, None))  # ...and the app closes
    done, _ = await asyncio.wait([stopping], timeout=5)
    assert done, "the worker is still running after the app closed"


async def test_a_steady_stream_is_embedded_in_batches_not_one_pass_a_message():
    """Rows committed while a pass runs wait for the next one to gather a batch: a model
    costs far more a text one at a time, and every pass has statements of its own."""
    waiting: list[int] = []
    batches: list[int] = []

    async def run_pass() -> int:
        taken = len(waiting)
        waiting.clear()
        await asyncio.sleep(0.005)  # the model at work
        if taken:
            batches.append(taken)
        return taken

    worker = EmbeddingWorker(sessions=None, embedder=None, interval=60, gather=0.1)  # type: ignore[arg-type]
    worker.run_pass = run_pass  # type: ignore[method-assign]
    async with worker:
        for n in range(60):  # a message every 10 ms for 0.6 s
            waiting.append(n)
            worker.wake()
            await asyncio.sleep(0.01)
        await asyncio.wait_for(worker.settled(), 5)
    assert sum(batches) == 60, "every row was embedded"
    assert len(batches) <= 12, f"{len(batches)} passes for 60 rows: {batches}"


async def test_a_held_worker_runs_its_first_pass_at_the_first_wake_up():
    """`companion chat` holds the catch-up: loading the model would compete with the first
    turn. Held, no pass runs until a turn wakes the worker; then it runs as usual."""
    passes: list[str] = []

    async def run_pass() -> int:
        passes.append("pass")
        return 0

    held = EmbeddingWorker(sessions=None, embedder=None, interval=60)  # type: ignore[arg-type]
    held.run_pass = run_pass  # type: ignore[method-assign]
    held.start(held=True)
    try:
        for _ in range(20):
            await asyncio.sleep(0)
        assert passes == [], "a held worker ran its catch-up before anything woke it"
        await asyncio.wait_for(held.settled(), 5)  # a turn committed
        assert passes == ["pass"]
    finally:
        await held.__aexit__(None, None, None)

    at_once = EmbeddingWorker(sessions=None, embedder=None, interval=60)  # type: ignore[arg-type]
    at_once.run_pass = run_pass  # type: ignore[method-assign]
    async with at_once:
        for _ in range(20):
            await asyncio.sleep(0)
    assert passes == ["pass", "pass"], "not held, the catch-up runs at start"


async def test_settling_gathers_nothing():
    """Whoever waits for the vectors (a piped chat before it exits) does not wait for the
    next batch to gather: the pass after a small one runs at once."""
    passes: list[int] = []

    async def run_pass() -> int:
        passes.append(1)
        return 1 if len(passes) == 1 else 0  # a small batch, then nothing

    worker = EmbeddingWorker(sessions=None, embedder=None, interval=600, gather=600)  # type: ignore[arg-type]
    worker.run_pass = run_pass  # type: ignore[method-assign]
    async with worker:
        await asyncio.wait_for(worker.settled(), 30)
    assert len(passes) >= 2
