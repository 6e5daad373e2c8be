"""Restarts and several processes: memory lives in the database, not in a process.

Each `companion chat` here is a real subprocess. Where two run at once, the fake model holds
a request until the situation under test has really arisen (the other process waiting on
the agent's lock, or both processes talking at the same time), so the test cannot pass by
the processes merely taking turns by luck.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from sqlalchemy import func, select, text

from bot import idle_stop
from core.events import EventKind, InboundEvent
from core.models import Event, Message, Reply
from tests.conftest import Run, cli_env, companion
from tests.fake_openai import default_brain, last_user_text

HOLD = 30  # seconds the fake waits for a situation to arise before giving up


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A private directory (not tmp_path: a concurrent pytest run may prune those)."""
    with tempfile.TemporaryDirectory(prefix="companion-scratch-") as name:
        yield Path(name)


def chat(env: dict, user: str, *lines: str):
    return companion(env, "chat", "--user", user, stdin="".join(f"{x}\n" for x in lines))


async def someone_waits(sessions) -> bool:
    """Is another process queued behind an agent's turn? Two processes have asked for an
    agent's claim (the last statement of each one's presence connection) while one of them
    holds it: the other waits for the claim to come free (core.runtime.presence)."""
    async with sessions() as session:
        asked = await session.scalar(
            text(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE query LIKE 'SELECT pg_try_advisory_lock(%'"
            )
        )
        held = await session.scalar(
            text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2")
        )
    return (asked or 0) >= 2 and (held or 0) >= 1


async def test_memory_survives_a_restart(fake, pg_url, schema):
    env = cli_env(fake, pg_url, schema)
    first = await chat(env, "alice", "remember that my cat is called Miso")
    assert (first.code, first.out) == (0, "Got it, I'll remember that.\n"), first

    second = await chat(env, "alice", "what do you know about me?", "what did I say about cat?")
    assert second.code == 0, second
    answer, found = second.out.split("Here is what I found: ", 1)
    assert answer == "I know this: Nothing known yet about this person.\nmy cat is called Miso\n"
    assert "remember that my cat is called Miso" in found  # recall storage survived too


async def test_pending_event_is_handled_once_at_the_next_start(
    fake, pg_url, schema, engine, sessions
):
    # A crash after the message was stored and before the model was called.
    scope = await engine.agent("local", "alice", display_name="alice")
    event_id = await engine.submit(scope, InboundEvent(EventKind.USER_MESSAGE, "I was cut off"))
    assert fake.requests == []

    # Two processes start at once, with nothing to say: both look for leftovers at start,
    # and only one may handle it. The model answers once the other one has come and gone:
    # it found the agent claimed, left the leftover to the claimer and exited.
    held: list[bool] = []
    processes: list[asyncio.Task] = []

    async def one_left() -> bool:
        return any(process.done() for process in processes)

    async def brain(body: dict[str, Any]) -> dict[str, Any]:
        held.append(await _until(one_left, HOLD))
        return default_brain(body)

    fake.brain = brain
    env = cli_env(fake, pg_url, schema)
    processes += [asyncio.ensure_future(chat(env, "alice")) for _ in range(2)]
    one, two = await asyncio.gather(*processes)
    assert one.code == two.code == 0, (one, two)
    assert (one.out + two.out).count("You said: I was cut off") <= 1

    assert [last_user_text(body) for body in fake.chat_requests] == ["I was cut off"]
    assert held == [True], "the second process never came while the first held the agent"

    async with sessions() as session:
        event = await session.get(Event, event_id)
        replies = list(await session.scalars(select(Reply.text).where(Reply.event_id == event_id)))
        said = list(
            await session.scalars(
                select(Message.content)
                .where(Message.agent_id == scope.agent_id, Message.role == "user")
                .order_by(Message.id)
            )
        )
        pending = await session.scalar(
            select(func.count()).select_from(Event).where(Event.status == "pending")
        )
    assert event is not None and event.status == "done"
    assert replies == ["You said: I was cut off"]
    assert said == ["I was cut off"]
    assert pending == 0


async def test_two_processes_one_agent_take_turns(fake, pg_url, schema, sessions):
    lines = {
        "a": ["remember that A likes apples", "a2", "a3", "remember that A likes avocados", "a5"],
        "b": ["remember that B likes bananas", "b2", "remember that B likes beets", "b4", "b5"],
    }
    contended = asyncio.Event()
    observed: dict[str, bool] = {}

    async def brain(body: dict[str, Any]) -> dict[str, Any]:
        # Hold the very first turn until the other process is queued behind its lock.
        if not contended.is_set():
            contended.set()
            observed["contention"] = await _until(lambda: someone_waits(sessions), HOLD)
        await asyncio.sleep(0.03)  # a model takes a moment: widen every window
        return default_brain(body)

    fake.brain = brain
    env = cli_env(fake, pg_url, schema)
    a, b = await asyncio.gather(chat(env, "alice", *lines["a"]), chat(env, "alice", *lines["b"]))

    assert observed["contention"], "the second process never waited: nothing was tested"
    got_it = "Got it, I'll remember that."
    assert (a.code, b.code) == (0, 0), (a, b)
    assert a.out.splitlines() == [got_it, "You said: a2", "You said: a3", got_it, "You said: a5"]
    assert b.out.splitlines() == [got_it, "You said: b2", got_it, "You said: b4", "You said: b5"]

    # One turn at a time: a turn's requests are consecutive, and each process's turns come
    # in its own order. (A turn's later steps repeat its user message as the newest one.)
    turns: list[str] = []
    for body in fake.chat_requests:
        said = last_user_text(body)
        if not turns or turns[-1] != said:
            turns.append(said)
    assert len(turns) == 10, turns
    assert [t for t in turns if t in lines["a"]] == lines["a"], turns
    assert [t for t in turns if t in lines["b"]] == lines["b"], turns
    assert len(fake.chat_requests) == 14  # 10 turns, 4 of them two steps long
    # And every prompt continues the one before it (but its closing status alert): nobody
    # worked from a stale history.
    for before, after in itertools.pairwise(fake.chat_requests):
        previous = before["messages"][1:-1]
        assert after["messages"][1 : len(previous) + 1] == previous


def postgres_processes(data_dir: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if str(data_dir) in cmdline and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


async def test_two_processes_share_one_embedded_postgres(fake, pg_url, scratch):
    data_dir = scratch / "companion-data"
    env = cli_env(fake, pg_url, COMPANION_DATA_DIR=str(data_dir))
    del env["DATABASE_URL"]  # no server given: each process must start or join the embedded one
    both_talking = asyncio.Event()
    alice_gone = asyncio.Event()
    in_flight = 0
    seen: dict[str, bool] = {}

    async def brain(body: dict[str, Any]) -> dict[str, Any]:
        nonlocal in_flight
        said = last_user_text(body)
        if said == "bob again":
            # Bob still needs the database after alice's process has exited.
            seen["bob waited for alice"] = await _wait(alice_gone)
        else:
            in_flight += 1
            if in_flight >= 2:
                both_talking.set()
            seen[f"{said}: both talking"] = await _wait(both_talking)
        return default_brain(body)

    fake.brain = brain

    async def alice() -> Run:
        try:
            return await chat(env, "alice", "hello from alice")
        finally:
            alice_gone.set()

    try:
        a, b = await asyncio.gather(alice(), chat(env, "bob", "hello from bob", "bob again"))
        assert (a.code, a.out) == (0, "You said: hello from alice\n"), a
        assert (b.code, b.out) == (0, "You said: hello from bob\nYou said: bob again\n"), b
        assert seen == {
            "hello from alice: both talking": True,
            "hello from bob: both talking": True,
            "bob waited for alice": True,
        }
        assert (data_dir / "postgres" / "PG_VERSION").exists()  # the embedded one was used

        # The last one out left it for the next command; once unused, the idle stop ends it
        # (here at once: no idle time).
        assert idle_stop.postmaster_pid(data_dir) is not None
        await asyncio.to_thread(idle_stop.watch, data_dir, 0.0, 0.25)

        async def stopped() -> bool:  # the command line as listed: a process may end since
            left = postgres_processes(data_dir)
            return not [p for p in left if "idle_stop" not in " ".join(p.info["cmdline"])]

        assert await _until(stopped, 5), postgres_processes(data_dir)
    finally:
        for proc in postgres_processes(data_dir):  # never leave a server behind
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.terminate()


async def _wait(event: asyncio.Event) -> bool:
    try:
        await asyncio.wait_for(event.wait(), HOLD)
    except TimeoutError:
        return False
    return True


async def _until(check: Callable[[], Awaitable[bool]], seconds: float) -> bool:
    """Poll `check` until it is true (True) or `seconds` have passed (False)."""
    deadline = time.monotonic() + seconds
    while not await check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True
