"""Slack hears "received" only for a stored event; what runs after it is counted and kept.

Through Bolt's own dispatch (as in tests/test_slack.py), with the app built exactly as
`companion run` builds it, against the fake Web API. The fake can look at the database at
the moment each Web API call arrives, which is how the order "stored, then everything else"
is checked. `companion run` itself, killed at random, is tests/test_acknowledged.py.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import openai
import pytest
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.request.async_request import AsyncBoltRequest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import async_sessionmaker

from adapters.common import Services
from adapters.inbound import FILE_FAILED, take
from adapters.slack import build_slack_app
from adapters.slack.events import (
    finish_held,
    one_workspace,
    read_message,
)
from adapters.slack.posting import SlackOutlets
from bot.database import make_engine, migrate
from core.config import EngineConfig
from core.llm import OpenAIChat
from core.members.service import Members
from core.memory.tokens import TokenCounter
from core.memory.turn import Mind
from core.models import Event, Passage, Reply
from core.runtime.engine import Engine
from tests.fake_openai import FakeOpenAI, last
from tests.fake_slack import BOT_USER, FakeSlack, settle, signed
from tests.rigs import SLACK_SECRET as SECRET
from tests.rigs import slack_envelope as envelope
from tests.rigs import slack_message as message
from tests.test_faults import private_pg, scratch  # noqa: F401 (fixtures)

NOTES = b"# Garden\nThe tomatoes go in the south bed."
BOLT_OWN = {"auth.test"}  # Bolt asks who the bot is, once per process, before any listener


def build(engine: Engine, sessions: Any, clock: Any, api: FakeSlack) -> Any:
    services = Services(engine, Members(sessions, EngineConfig(), clock))
    return build_slack_app(services, "xoxb-test", SECRET, api.base_url)


@pytest.fixture
async def api():
    async with FakeSlack() as server:
        server.add_user("U1")
        yield server


@pytest.fixture
def app(engine, sessions, clock, api):
    return build(engine, sessions, clock, api)


async def post(app: Any, payload: dict[str, Any], retry: int = 0) -> int:
    """What Slack gets back for the request: the status of the acknowledgement."""
    body = json.dumps(payload)
    headers = signed(body, SECRET)
    if retry:
        headers.update({"x-slack-retry-num": str(retry), "x-slack-retry-reason": "http_error"})
    response = await app.async_dispatch(AsyncBoltRequest(body=body, headers=headers))
    return response.status


def texts(api: FakeSlack) -> list[str]:
    return [call["text"] for call in api.called("chat.postMessage")]


def shared(api: FakeSlack, text: str, *files: tuple[str, str]) -> dict[str, Any]:
    """A DM with files: (name, url) each."""
    listed = [
        {"id": f"F{name}", "name": name, "size": 40, "url_private_download": url}
        for name, url in files
    ]
    return message(text=text, subtype="file_share", files=listed)


async def test_every_slack_call_comes_after_the_event_is_stored(app, api, sessions):
    stored_when_called: list[tuple[str, int]] = []

    async def look(method: str, args: dict[str, Any]) -> None:
        if method not in BOLT_OWN:
            async with sessions() as session:
                events = await session.scalar(select(func.count()).select_from(Event))
            stored_when_called.append((method, events))

    api.on_call = look
    assert await post(app, message(text="hello there")) == 200
    async with sessions() as session:
        assert await session.scalar(select(func.count()).select_from(Event)) == 1
    await settle()
    methods = [method for method, _ in stored_when_called]
    assert {"users.info", "reactions.add", "chat.postMessage"} <= set(methods)
    assert all(events == 1 for _, events in stored_when_called), stored_when_called
    assert texts(api) == ["You said: hello there"]


async def test_wait_idle_waits_for_the_turn_after_the_acknowledgement(app, api, engine):
    api.latency = 0.2  # the answer takes a while after Slack got its 200
    assert await post(app, message(text="still there?")) == 200
    await asyncio.wait_for(engine.wait_idle(), 30)
    assert texts(api) == ["You said: still there?"]
    assert api.called("reactions.remove")


@pytest.fixture
async def restartable(private_pg, fake):  # noqa: F811
    """(engine, sessions, server) on a Postgres of this test's own, which it may stop."""
    db = make_engine(private_pg.get_uri(driver="asyncpg"))
    await migrate(db, 16)
    sessions = async_sessionmaker(db, expire_on_commit=False)
    client = openai.AsyncOpenAI(base_url=fake.base_url, api_key="test", max_retries=0)
    engine = Engine(sessions, Mind(OpenAIChat(client, "fake"), TokenCounter(), EngineConfig()))
    try:
        yield engine, sessions, private_pg
    finally:
        await engine.aclose()
        await client.close()

        await db.dispose()


async def count_events(sessions: Any) -> int:
    async with sessions() as session:
        return int(await session.scalar(select(func.count()).select_from(Event)) or 0)


async def test_a_message_that_cannot_be_stored_is_not_acknowledged(restartable, clock):
    """Database down: Slack gets a 500 (so it sends the event again) and nobody is told
    anything yet; the retry, once the database is back, is stored and answered once."""
    engine, sessions, server = restartable
    async with FakeSlack() as api:
        api.add_user("U1")
        app = build(engine, sessions, clock, api)
        payload = message(text="are you up?")
        await asyncio.to_thread(server.stop)
        assert await post(app, payload) == 500
        await settle()
        assert api.called("chat.postMessage") == []  # no apology: Slack sends it again
        await asyncio.to_thread(server.ensure_postgres_running)
        assert await post(app, payload, retry=1) == 200
        await settle()
        assert texts(api) == ["You said: are you up?"]
    assert await count_events(sessions) == 1


def socket_envelope(envelope_id: str, payload: dict[str, Any], retry: int = 0) -> dict:
    return {
        "envelope_id": envelope_id,
        "type": "events_api",
        "accepts_response_payload": False,
        "retry_attempt": retry,
        "retry_reason": "timeout" if retry else "",
        "payload": payload,
    }


async def until(predicate: Any, seconds: float = 30) -> None:
    for _ in range(int(seconds * 20)):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise TimeoutError


async def test_socket_mode_acknowledges_only_what_is_stored(restartable, clock, caplog):
    """Socket Mode: the envelope is acknowledged once the event is in the database, and not
    at all while it cannot be stored (Slack then sends it again)."""
    engine, sessions, server = restartable
    stored_at_ack: dict[str, int] = {}

    async def look(ack: dict[str, Any]) -> None:
        stored_at_ack[ack["envelope_id"]] = await count_events(sessions)

    async with FakeSlack() as api:
        api.add_user("U1")
        api.on_ack = look
        handler = AsyncSocketModeHandler(build(engine, sessions, clock, api), "xapp-test")
        await handler.connect_async()
        try:
            await api.push(socket_envelope("E1", message(text="first")))
            await until(lambda: "E1" in stored_at_ack)
            assert stored_at_ack["E1"] == 1
            await settle()  # answered before the database goes away

            await asyncio.to_thread(server.stop)
            second = message(text="second")
            await api.push(socket_envelope("E2", second))
            await until(lambda: "was not stored" in caplog.text)
            await asyncio.to_thread(server.ensure_postgres_running)
            await api.push(socket_envelope("E3", second, retry=1))
            await until(lambda: "E3" in stored_at_ack)
            await settle()
        finally:
            await handler.close_async()
    assert "E2" not in stored_at_ack and stored_at_ack["E3"] == 2
    assert texts(api) == ["You said: first", "You said: second"]


async def test_words_beside_a_file_survive_a_rate_limited_reply(
    app, api, engine, platforms, sessions, clock
):
    api.files["notes.md"] = NOTES
    api.fail_once("chat.postMessage", "ratelimited")  # the reply about the file
    payload = shared(api, "here are my garden notes", ("notes.md", f"{api.root}/files/notes.md"))
    assert await post(app, payload) == 200
    await settle()
    assert texts(api)[-1] == "You said: here are my garden notes"
    async with sessions() as session:
        assert await session.scalar(select(func.count()).select_from(Passage)) == 1
        waiting = (await session.scalars(select(Reply).where(Reply.delivered_at.is_(None)))).all()
    assert [reply.attempts for reply in waiting] == [1]  # the file's reply, kept for a retry
    platforms.add("slack", SlackOutlets(one_workspace(app.client)))
    clock.advance(seconds=1)
    assert await engine.outbox.redeliver(timedelta(0)) == (1, 0)
    assert api.called("chat.postMessage")[-1]["channel"] == "D1"


async def test_a_file_that_breaks_costs_only_that_file(app, api, fake, sessions):
    api.files["notes.md"] = NOTES
    api.broken.add("gone.md")
    dead = f"{api.root}/files/gone.md"  # the connection drops
    payload = shared(
        api,
        "two files for you",
        ("gone.md", dead),
        ("notes.md", f"{api.root}/files/notes.md"),
    )
    assert await post(app, payload) == 200
    await settle()
    said = texts(api)
    assert FILE_FAILED.format(name="gone.md") in said
    assert said[-1] == "You said: two files for you"
    async with sessions() as session:
        sources = (await session.scalars(select(Passage.source))).all()
    assert [source.split(" (")[0] for source in sources] == ["notes.md"]
    prompts = [json.dumps(last(body)) for body in fake.chat_requests]
    assert "notes.md" in prompts[0] and "two files for you" in prompts[-1]  # file first


async def test_a_reply_in_a_thread_is_stored_before_the_slack_calls_too(app, api, sessions):
    event = {
        "type": "app_mention",
        "channel": "C5",
        "user": "U1",
        "ts": "1700000009.000300",
        "text": "<@UBOT> what's up?",
    }
    seen: list[int] = []

    async def look(method: str, args: dict[str, Any]) -> None:
        if method not in BOLT_OWN:
            async with sessions() as session:
                seen.append(await session.scalar(select(func.count()).select_from(Event)))

    api.on_call = look
    assert await post(app, envelope(event)) == 200
    await settle()
    assert seen and set(seen) == {1}
    (answer,) = api.called("chat.postMessage")
    assert answer["thread_ts"] == "1700000009.000300"


async def test_a_message_whose_files_never_came_tells_the_agent(engine, clock, fake: FakeOpenAI):
    """Its fetcher died (the process was killed after Slack heard "received"): the words
    wait a while, then go to the agent with a note of the files it never got."""
    from adapters.inbound import SharedFile, message_event, take

    scope = await engine.agent("slack:T0001", "U1")

    async def never() -> bytes:
        raise AssertionError("nobody fetches it in this test")

    file = SharedFile("plan.pdf", 100, "slack:file:Fplan", never)
    held = await take(engine, scope, message_event("see the plan", "m:1", {}, [file]), True)
    later = await engine.converse(scope, message_event("and hello", "m:2", {}, []))
    assert later.replies == ["You said: and hello"]  # later words are not stuck behind it
    await engine.resume()
    assert await engine.outbox.undelivered(held) == []  # still waiting for its file
    clock.advance(minutes=3)
    await engine.resume()
    (reply,) = await engine.outbox.take_replies(held)
    prompt = json.dumps(last(fake.chat_requests[-1]))
    assert "see the plan" in prompt and "plan.pdf" in prompt and "could not be read" in prompt
    assert reply.startswith("You said: see the plan")


async def test_a_message_held_for_its_files_is_finished_after_a_restart(app, api, engine, fake):
    """The process died right after storing a message with a file (Slack had its 200):
    the next start fetches the file again, then answers the words beside it."""
    api.files["notes.md"] = NOTES
    payload = shared(api, "what is in my notes?", ("notes.md", f"{api.root}/files/notes.md"))
    message_ = read_message(payload, payload["event"], "xoxb-test", BOT_USER)
    scope = await engine.agent(message_.tenant, message_.user)
    await take(engine, scope, message_.event(), has_files=True)  # ... and then it died

    services = Services(engine, Members(engine.sessions, EngineConfig(), engine.clock))
    await finish_held(services, one_workspace(app.client))  # the next start
    assert texts(api)[-1] == "You said: what is in my notes?"
    assert "notes.md" in json.dumps(last(fake.chat_requests[0]))  # the file first
    assert await engine.seen.held("slack:") == []
