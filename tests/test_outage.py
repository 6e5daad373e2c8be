"""An outage of the model endpoint loses no conversation.

Found: with the chat endpoint answering 503 for 75 seconds, each of 12 DMs got its own
apology and was marked failed; none was answered once the model came back. Now a message
that meets a model that is down waits, pending, with one notice to its member per outage;
the endpoint is not asked again until a probe is due; the run loop's backlog pass (resume,
then delivery) answers every waiting message in order once it is back; a message that
waited past COMPANION_OUTAGE_MINUTES is told it went unanswered. Driven through the real
Bolt app, the real openai client and the fake endpoint's outage.
"""

from __future__ import annotations

import asyncio
import io
from datetime import timedelta

from sqlalchemy import select

from adapters.common import Services
from adapters.slack.events import one_workspace
from adapters.slack.posting import SlackOutlets
from bot.chat import run_chat
from bot.observability import PrometheusMetrics
from bot.run import RESUME_AT_ONCE
from core.config import EngineConfig
from core.events import EventKind, EventStatus, InboundEvent
from core.models import Event
from core.runtime.apologies import WAITING_NOTICE
from core.wire.outage import LONGEST_WAIT
from tests.fake_openai import completion, default_brain
from tests.rigs import slack_message, slack_rig


async def backlog(engine, slack, platforms) -> None:
    """What `companion run` does every few seconds: resume, then deliver at once (through
    the engine's `platforms`, which serve Slack)."""
    platforms.add("slack", SlackOutlets(one_workspace(slack.app.client)))
    if await engine.resume(at_once=RESUME_AT_ONCE):
        await engine.outbox.redeliver(timedelta(0))


def texts(slack) -> list[str]:
    return [post["text"] for post in slack.posted()]


async def test_a_member_who_writes_during_an_outage_is_answered_after_it_in_order(
    engine, platforms, members, fake, clock
):
    fake.brain = default_brain
    async with slack_rig(Services(engine, members), users=("U1",)) as slack:
        await slack.dispatch(slack_message(text="before"))
        fake.down = 503
        for words in ("one", "two", "three"):
            await slack.dispatch(slack_message(text=words))
            clock.advance(seconds=1)
        assert texts(slack) == ["You said: before", WAITING_NOTICE]
        assert fake.down_calls == 1, "a down endpoint was asked again before a probe was due"
        assert engine.mind.health.state()[0] == "down"

        clock.advance(seconds=LONGEST_WAIT)  # a probe is due; the endpoint is still down
        await backlog(engine, slack, platforms)
        assert fake.down_calls == 2 and texts(slack)[2:] == []

        fake.down = None
        clock.advance(seconds=LONGEST_WAIT)
        await backlog(engine, slack, platforms)
        assert texts(slack)[2:] == ["You said: one", "You said: two", "You said: three"]
        assert {post["channel"] for post in slack.posted()} == {"D1"}
        assert engine.mind.health.state()[0] == "ok"

        # The next outage is news again: one more notice.
        fake.down = 503
        await slack.dispatch(slack_message(text="four"))
        await slack.dispatch(slack_message(text="five"))
        assert texts(slack)[5:] == [WAITING_NOTICE]
        await backlog(engine, slack, platforms)  # no probe due yet: nothing asked, nothing sent
        assert fake.down_calls == 3 and texts(slack)[6:] == []


async def test_once_the_probe_finds_the_model_back_every_member_is_answered_in_that_pass(
    engine, platforms, members, fake, clock
):
    async def slow(body):  # the probe is still on its way when the others would call
        await asyncio.sleep(0.3)
        return default_brain(body)

    fake.brain = slow
    async with slack_rig(Services(engine, members), users=("U1", "U2", "U3")) as slack:
        fake.down = 503
        for user in ("U1", "U2", "U3"):
            await slack.dispatch(slack_message(user=user, channel=f"D{user[1]}", text=user))
        assert texts(slack) == [WAITING_NOTICE] * 3

        fake.down = None
        clock.advance(seconds=LONGEST_WAIT)  # a probe is due, and the endpoint is back
        await backlog(engine, slack, platforms)  # one pass of the run loop
        answers = {post["channel"]: post["text"] for post in slack.posted()[3:]}
        assert answers == {"D1": "You said: U1", "D2": "You said: U2", "D3": "You said: U3"}


async def test_metrics_count_what_waits_for_the_model(engine, members, fake, sessions):
    fake.brain = default_brain
    metrics = PrometheusMetrics(sessions, engine.mind.health.outage)
    async with slack_rig(Services(engine, members), users=("U1", "U2")) as slack:
        fake.down = 502
        await slack.dispatch(slack_message(user="U1", channel="D1", text="hi"))
        await slack.dispatch(slack_message(user="U2", channel="D2", text="hello"))
        await slack.dispatch(slack_message(user="U2", channel="D2", text="anyone?"))
        assert texts(slack) == [WAITING_NOTICE, WAITING_NOTICE]  # one each
    page = (await metrics.exposition()).decode()
    assert "companion_model_up 0.0" in page
    assert 'companion_queue_depth{queue="waiting_for_model"} 3.0' in page


async def test_a_message_that_waited_too_long_is_told_so_without_a_model_call(
    make_engine_for, platforms, members, fake, clock, sessions
):
    engine = make_engine_for(EngineConfig(outage_wait=timedelta(hours=2)), platforms=platforms)
    fake.brain = default_brain
    async with slack_rig(Services(engine, members), users=("U1",)) as slack:
        fake.down = 503
        await slack.dispatch(slack_message(text="are you there?"))
        fake.down = None
        clock.advance(hours=3)
        asked = len(fake.requests)
        await backlog(engine, slack, platforms)
        told = texts(slack)
    assert told[0] == WAITING_NOTICE
    assert len(told) == 2 and "could not answer your message from" in told[1]
    assert len(fake.requests) == asked, "a message given up on still went to the model"
    async with sessions() as session:
        event = await session.scalar(select(Event).order_by(Event.id.desc()))
    assert event.status == EventStatus.FAILED


async def test_scheduled_events_wait_without_a_notice(engine, fake, clock, sessions):
    fake.brain = default_brain
    scope = await engine.agent("t", "ana")
    fake.down = 503
    opener = InboundEvent(EventKind.SCHEDULED, "[opener] ask how the exam went")
    said = await engine.converse(scope, opener)
    assert said.replies == []
    assert said.result is not None and said.result.deferred
    fake.down = None
    clock.advance(seconds=LONGEST_WAIT)
    asked = len(fake.requests)
    assert await engine.resume() == 1
    assert len(fake.requests) > asked
    async with sessions() as session:
        event = await session.get(Event, said.event_id)
    assert event is not None and event.status == EventStatus.DONE


async def test_the_terminal_shows_what_waited_before_the_next_answer(engine, members, fake, clock):
    fake.brain = default_brain
    fake.down = 503
    first = io.StringIO()
    await run_chat(engine, members, "local", "ana", False, io.StringIO("one\ntwo\n"), first)
    assert first.getvalue() == WAITING_NOTICE + "\n"
    fake.down = None
    clock.advance(seconds=LONGEST_WAIT)
    later = io.StringIO()
    await run_chat(engine, members, "local", "ana", False, io.StringIO("three\n"), later)
    assert later.getvalue().splitlines() == ["You said: one", "You said: two", "You said: three"]


async def test_an_answer_in_plain_words_after_an_outage_reaches_the_member(
    engine, platforms, members, fake, clock
):
    """Found by the chaos campaign: the notice is stored as a reply to the waiting message,
    and the turn that went on once the model was back counted it as its own answer, so a
    model answering in plain words (no send_message) was taken for thinking aloud."""
    async with slack_rig(Services(engine, members), users=("U1",)) as slack:
        fake.down = 503
        await slack.dispatch(slack_message(text="are you there?"))
        fake.down = None
        fake.brain = lambda body: completion("Here I am, sorry for the wait.")
        clock.advance(seconds=LONGEST_WAIT)
        await backlog(engine, slack, platforms)
        assert texts(slack) == [WAITING_NOTICE, "Here I am, sorry for the wait."]


async def test_a_message_that_waited_is_answered_for_its_own_words_when_an_older_one_comes_late(
    engine, fake, clock
):
    """Found by the chaos campaign, after a SIGKILL during an outage: a message held for its
    files (the next process fetched them again) is older than one whose turn began and waited
    for the model. The older one went first once the model was back, its words stored after
    the waiting ones, and the waiting turn went on with the newest words of its prompt, not
    its own: the member got the other message's answer twice and none to what they asked."""
    fake.brain = default_brain
    scope = await engine.agent("t", "ana")
    with_files = InboundEvent(EventKind.USER_MESSAGE, "the photo shows my cat", "m1")
    held = await engine.submit(scope, with_files, hold=True)
    fake.down = 503
    asked = InboundEvent(EventKind.USER_MESSAGE, "are you there?", "m2")
    waiting = await engine.converse(scope, asked)
    assert waiting.replies == [WAITING_NOTICE]
    fake.down = None
    clock.advance(seconds=LONGEST_WAIT)
    await engine.release(scope, held)
    await engine.resume()
    assert await engine.outbox.take_replies(waiting.event_id) == ["You said: are you there?"]
    assert await engine.outbox.take_replies(held) == ["You said: the photo shows my cat"]
