"""One agent handles one event at a time, in arrival order; nothing is rejected or dropped."""

import asyncio

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import async_sessionmaker

from bot.database import make_engine
from core.events import EventKind, InboundEvent
from core.models import Event
from tests.conftest import _engine_builder, served_url
from tests.fake_openai import last_user_text, person_said, say


async def test_concurrent_messages_to_one_agent_are_handled_in_order(make_engine_for, fake):
    active = 0
    overlap = []

    async def brain(body):
        nonlocal active
        active += 1
        overlap.append(active)
        await asyncio.sleep(0.01)
        active -= 1
        return say("re: " + last_user_text(body))

    fake.brain = brain
    engines = [make_engine_for() for _ in range(4)]  # four "processes", one database
    scope = await engines[0].agent("t", "u")
    texts = [f"message {i}" for i in range(20)]

    async def send(i):
        engine = engines[i % len(engines)]
        return await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, texts[i]))

    exchanges = await asyncio.gather(*(send(i) for i in range(20)))
    assert [e.replies for e in exchanges] == [[f"re: {t}"] for t in texts]
    assert max(overlap) == 1, "two turns of one agent ran at once"
    seen = [last_user_text(b) for b in fake.chat_requests]
    order = sorted(range(20), key=lambda i: exchanges[i].event_id)
    assert seen == [texts[i] for i in order], "the model saw messages in arrival order"
    # Each prompt holds the earlier messages too: no message fell out of the agent's context.
    for n, body in enumerate(fake.chat_requests):
        said = person_said(body)
        assert all(texts[i] in said for i in order[: n + 1])


async def test_different_agents_run_in_parallel(make_engine_for, fake):
    active = 0
    peak = 0

    async def brain(body):
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.05)
        active -= 1
        return say("hi")

    fake.brain = brain
    engine = make_engine_for()
    scopes = [await engine.agent("t", f"user{i}") for i in range(5)]
    await asyncio.gather(
        *(engine.converse(s, InboundEvent(EventKind.USER_MESSAGE, "hello")) for s in scopes)
    )
    assert peak > 1


async def test_redelivered_event_is_stored_and_answered_once(engine, fake, sessions):
    scope = await engine.agent("t", "u")
    event = InboundEvent(EventKind.USER_MESSAGE, "hello", dedup_key="platform-msg-1")
    first = await engine.converse(scope, event)
    second = await engine.converse(scope, event)
    assert first.event_id == second.event_id
    assert first.replies == ["You said: hello"] and second.replies == []
    assert len(fake.chat_requests) == 1
    async with sessions() as session:
        events = list(await session.scalars(select(Event)))
    assert len(events) == 1 and events[0].status == "done"


async def test_stored_before_the_model_is_called(engine, fake, sessions):
    """Write first, then think: a crash before the model call loses nothing."""
    scope = await engine.agent("t", "u")
    event_id = await engine.submit(scope, InboundEvent(EventKind.USER_MESSAGE, "are you there?"))
    assert fake.requests == []
    async with sessions() as session:
        stored = await session.get(Event, event_id)
    assert stored.status == "pending" and stored.payload["text"] == "are you there?"
    assert await engine.resume() == 1
    assert await engine.outbox.take_replies(event_id) == ["You said: are you there?"]


async def test_a_busy_agent_still_stores_new_events_at_once(make_engine_for, fake, sessions):
    """Write first: storing a message never waits for the agent's current turn to end."""
    release = asyncio.Event()
    started = asyncio.Event()

    async def brain(body):
        started.set()
        await release.wait()
        return say("done")

    fake.brain = brain
    busy, other = make_engine_for(), make_engine_for()
    scope = await busy.agent("t", "u")
    turn = asyncio.create_task(busy.converse(scope, InboundEvent(EventKind.USER_MESSAGE, "one")))
    await asyncio.wait_for(started.wait(), 10)
    event_id = await asyncio.wait_for(
        other.submit(scope, InboundEvent(EventKind.USER_MESSAGE, "two")), 3
    )
    async with sessions() as session:
        assert (await session.get(Event, event_id)).status == "pending"
    release.set()
    await turn  # its drain goes on to the queued "two"
    async with sessions() as session:
        assert (await session.get(Event, event_id)).status == "done"


async def test_turns_waiting_on_the_model_hold_no_connection(pg_url, schema, fake, clock):
    """Handlers waiting for their agent's turn held a pooled connection each while they waited
    for its row lock, and a turn held one for its whole model call: a few chatty members took
    the whole pool, and everyone else's message could not even be stored. Now a turn commits
    before each model call: with two turns thinking and five handlers queued behind one of
    them, the pool holds only the process's presence connection, and another member is
    stored and answered at once."""
    db = make_engine(served_url(pg_url, schema), schema, pool_size=2)  # 2 + 2 overflow
    sessions = async_sessionmaker(db, expire_on_commit=False)
    thinking = {name: asyncio.Event() for name in ("ann", "carl")}
    release = {name: asyncio.Event() for name in ("ann", "carl")}

    async def brain(body):
        said = last_user_text(body)
        who = said.split()[0]
        if who in thinking:
            thinking[who].set()
            await release[who].wait()
        return say("re: " + said)

    fake.brain = brain
    try:
        async with _engine_builder(sessions, fake, clock) as build:
            engine = build()
            ann, bob, carl = [await engine.agent("t", n) for n in ("ann", "bob", "carl")]

            def talk(scope, text):
                event = InboundEvent(EventKind.USER_MESSAGE, text)
                return asyncio.create_task(engine.converse(scope, event))

            first = talk(ann, "ann 0")
            carls = talk(carl, "carl 0")
            await asyncio.wait_for(thinking["ann"].wait(), 10)
            await asyncio.wait_for(thinking["carl"].wait(), 10)  # both turn slots are busy
            queued = [talk(ann, f"ann {i}") for i in range(1, 6)]
            # Ann's handlers store their events and queue (seen through a connection of
            # another pool: on a loaded machine storing five events can take a while); then,
            # however long the turns think, the pool holds the presence connection only, no
            # turn's nor a waiting handler's.
            looking = make_engine(served_url(pg_url, schema), schema, pool_size=1)
            try:
                for _ in range(400):
                    async with looking.connect() as conn:
                        if await conn.scalar(text("SELECT count(*) FROM events")) >= 7:
                            break
                    await asyncio.sleep(0.05)
            finally:
                await looking.dispose()
            for _ in range(100):  # the last handler gives its connection back
                if db.pool.checkedout() == 1:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)
            assert db.pool.checkedout() == 1  # the presence connection, no turn's
            async with asyncio.timeout(5):  # nobody waits for Ann's turn or the pool
                bobs = await engine.submit(bob, InboundEvent(EventKind.USER_MESSAGE, "bob 0"))
                assert (await engine.answer(bob, bobs)).replies == ["re: bob 0"]
                async with sessions() as session:
                    assert await session.scalar(text("SELECT 1")) == 1
            release["carl"].set()
            release["ann"].set()
            answered = await asyncio.wait_for(asyncio.gather(first, carls, *queued), 20)
    finally:
        await db.dispose()
    assert [e.replies for e in answered] == [
        ["re: ann 0"],
        ["re: carl 0"],
        *[[f"re: ann {i}"] for i in range(1, 6)],
    ]


async def test_turns_wait_while_a_platform_waits_for_an_acknowledgement(engine, fake):
    """Many members at once: storing what Slack sent (its 3 s acknowledgement) comes before
    the turns of earlier messages, which give way at their next step until it is stored."""
    scope = await engine.agent("t", "early")
    receiving = engine.activity.receiving()
    await receiving.__aenter__()  # a request is being stored and acknowledged
    try:
        turn = asyncio.create_task(
            engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, "hello"))
        )
        await _giving_way(engine, 1)
        assert not fake.chat_requests, "a turn ran while a request waited for its ack"
        assert not turn.done()
    finally:
        await receiving.__aexit__(None, None, None)
    exchange = await asyncio.wait_for(turn, 30)
    assert exchange.replies and len(fake.chat_requests) == 1


async def test_requests_that_never_stop_slow_turns_down_but_never_stop_them(engine, fake):
    scope = await engine.agent("t", "patient")
    engine.activity.quiet_limit = 0.05
    async with engine.activity.receiving():  # requests keep coming for the whole turn
        exchange = await asyncio.wait_for(
            engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, "hello")), 30
        )
    assert exchange.replies


async def test_background_work_waits_for_the_acknowledgement_then_runs(engine):
    ran = asyncio.Event()

    async def after_ack() -> None:
        ran.set()

    async with engine.activity.receiving():
        engine.activity.start(after_ack(), "after the acknowledgement")
        await _giving_way(engine, 1)
        assert not ran.is_set()
    await asyncio.wait_for(ran.wait(), 5)
    await engine.wait_idle()


async def _giving_way(engine, tasks: int) -> None:
    """Until that many tasks wait for the requests being received (or fail after 20 s)."""
    for _ in range(2000):
        if engine.activity.giving_way == tasks:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{engine.activity.giving_way} tasks gave way, not {tasks}")
