"""Replies that fail to go out stay in the outbox and are retried until delivered, once."""

from datetime import timedelta

import pytest
from slack_sdk.web.async_client import AsyncWebClient
from sqlalchemy import select, update

from adapters.common import Services
from adapters.slack.events import one_workspace
from adapters.slack.posting import SlackOutlets
from core.events import EventKind, InboundEvent
from core.models import Reply
from core.ports import Posting
from tests.rigs import slack_envelope, slack_message, slack_rig


@pytest.fixture
async def slack(engine, members, platforms):
    async with slack_rig(Services(engine, members), users=("U1",)) as rig:
        web = AsyncWebClient(token="xoxb-test", base_url=rig.api.base_url)
        platforms.add("slack", SlackOutlets(one_workspace(web)))
        yield rig


async def test_a_failed_reply_is_retried_in_its_thread_until_delivered(
    slack, engine, sessions, clock
):
    rig = slack
    api = rig.api
    api.fail_methods["chat.postMessage"] = "service_unavailable"
    event = {
        "type": "app_mention",
        "channel": "C5",
        "user": "U1",
        "ts": "1700000009.000300",
        "text": "<@UBOT> are you there?",
    }
    await rig.dispatch(slack_envelope(event))
    async with sessions() as session:
        row = await session.scalar(select(Reply))
    assert row.delivered_at is None and row.attempts == 1
    assert "service_unavailable" in row.last_error

    clock.advance(minutes=1)
    assert await engine.outbox.redeliver(timedelta(seconds=30)) == (
        0,
        1,
    )  # still down
    del api.fail_methods["chat.postMessage"]
    assert await engine.outbox.redeliver(timedelta(seconds=30)) == (1, 0)
    assert await engine.outbox.redeliver(timedelta(seconds=30)) == (0, 0)
    delivered = [c for c in api.called("chat.postMessage") if "are you there" in c["text"]]
    assert len(delivered) == 3  # two failed tries, then the one that went out
    assert delivered[-1]["channel"] == "C5" and delivered[-1]["thread_ts"] == "1700000009.000300"
    async with sessions() as session:
        row = await session.scalar(select(Reply))
    assert row.delivered_at is not None and row.attempts == 2


async def test_retries_stop_after_the_limit(slack, engine, sessions, clock):
    rig = slack
    api = rig.api
    api.fail_methods["chat.postMessage"] = "channel_not_found"
    await rig.dispatch(slack_message(text="hello"))
    for _ in range(12):
        clock.advance(minutes=1)
        await engine.outbox.redeliver(timedelta(seconds=30))
    async with sessions() as session:
        row = await session.scalar(select(Reply))
    assert row.attempts == 10 and row.delivered_at is None
    assert len(api.called("chat.postMessage")) == 10


class Thread:
    """A place of the test platform: a thread named in the event's meta."""

    limit = 2000

    def __init__(self, seen: list[tuple[str, str]], where: str) -> None:
        self.seen, self.where = seen, where

    def markup(self, text: str) -> str:
        return text

    async def post(self, part: str, tag) -> None:
        self.seen.append((self.where, part))

    async def posted(self, after) -> list:
        return []


class Threads:
    """The test platform's outlets: back in the thread the member wrote in, never a DM."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    async def direct(self, tenant: str, user: str) -> Thread:
        raise AssertionError("not a DM")

    async def written(self, tenant: str, meta: dict) -> Thread:
        return Thread(self.seen, meta["where"])


async def test_a_members_answers_go_out_in_the_order_they_wrote(engine, platforms):
    """Two messages of one member, handled by two handlers (two processes): the first
    handler died after its turn, before sending. The second handler sends the first answer
    first, back where it was asked, then its own: the member reads them in order."""
    threads = Threads()
    platforms.add("test", threads)
    scope = await engine.agent("test:T1", "U1")
    first = InboundEvent(EventKind.USER_MESSAGE, "first", "k1", {"where": "thread 1"})
    await engine.submit(scope, first)
    await engine.drain(scope)  # its turn ran; its handler died before sending the answer

    async def here(text: str, posting: Posting | None = None) -> None:
        threads.seen.append(("thread 2", text))

    second = InboundEvent(EventKind.USER_MESSAGE, "second", "k2", {"where": "thread 2"})
    await engine.converse(scope, second, send=here)
    assert threads.seen == [("thread 1", "You said: first"), ("thread 2", "You said: second")]


async def test_an_earlier_answer_that_cannot_be_posted_holds_up_only_itself(engine, platforms):
    """Three earlier answers wait (their handlers died before sending); the first one's
    thread refuses posts. The next message's handler passes over that one (it stays for a
    retry) and sends the other two, in order, before its own."""
    threads = Threads()
    platforms.add("test", threads)
    refused = Thread.post

    async def post(self, part: str, tag) -> None:
        if self.where == "thread 1":
            raise RuntimeError("the platform refused the post")
        await refused(self, part, tag)

    Thread.post = post  # type: ignore[method-assign]
    try:
        scope = await engine.agent("test:T1", "U1")
        ids = []
        for n in (1, 2, 3):
            words = InboundEvent(EventKind.USER_MESSAGE, f"m{n}", f"k{n}", {"where": f"thread {n}"})
            ids.append(await engine.submit(scope, words))
        await engine.drain(scope)  # their turns ran; their handlers died before sending

        async def here(text: str, posting: Posting | None = None) -> None:
            threads.seen.append(("thread 4", text))

        fourth = InboundEvent(EventKind.USER_MESSAGE, "m4", "k4", {"where": "thread 4"})
        await engine.converse(scope, fourth, send=here)
    finally:
        Thread.post = refused  # type: ignore[method-assign]
    assert threads.seen == [
        ("thread 2", "You said: m2"),
        ("thread 3", "You said: m3"),
        ("thread 4", "You said: m4"),
    ]
    assert await engine.outbox.undelivered(ids[0]) == ["You said: m1"]


async def _killed_after_posting(sessions, api, keep_parts: int | None = None) -> None:
    """What a SIGKILL between the post and marking it sent leaves: the member has the post
    (or its first `keep_parts` parts), the outbox says it was never sent."""
    async with sessions() as session, session.begin():
        await session.execute(update(Reply).values(delivered_at=None))
    if keep_parts is not None:
        for channel in api.posted.values():
            del channel[keep_parts:]


async def test_a_reply_posted_before_a_kill_is_not_posted_again(slack, engine, sessions, clock):
    rig = slack
    api = rig.api
    await rig.dispatch(slack_message(text="the blue door is mine"))
    await _killed_after_posting(sessions, api)

    clock.advance(minutes=1)
    assert await engine.outbox.redeliver(timedelta(seconds=30)) == (1, 0)
    seen = [m["text"] for m in api.posted["D1"]]
    assert seen == ["You said: the blue door is mine"]  # once, as the member sees it
    async with sessions() as session:
        assert (await session.scalar(select(Reply))).delivered_at is not None


async def test_only_the_parts_a_kill_cut_off_are_posted(slack, engine, sessions, clock):
    rig = slack
    api = rig.api
    long = " ".join(f"word{i}" for i in range(700))  # about 5,000 characters: two posts
    await rig.dispatch(slack_message(text=long))
    whole = [m["text"] for m in api.posted["D1"]]
    assert len(whole) == 2
    await _killed_after_posting(sessions, api, keep_parts=1)

    clock.advance(minutes=1)
    assert await engine.outbox.redeliver(timedelta(seconds=30)) == (1, 0)
    assert [m["text"] for m in api.posted["D1"]] == whole


async def test_the_next_message_does_not_repeat_an_answer_a_kill_left_unmarked(
    slack, engine, sessions
):
    """The member's next message, handled elsewhere, sends earlier waiting answers first:
    one that was in fact posted is not posted again."""
    rig = slack
    api = rig.api
    await rig.dispatch(slack_message(text="first"))
    await _killed_after_posting(sessions, api)
    await rig.dispatch(slack_message(text="second"))
    assert [m["text"] for m in api.posted["D1"]] == ["You said: first", "You said: second"]


async def test_without_the_history_scope_a_reply_goes_out_again_rather_than_never(
    slack, engine, sessions, clock, caplog
):
    rig = slack
    api = rig.api
    await rig.dispatch(slack_message(text="hello there"))
    await _killed_after_posting(sessions, api)
    api.fail_methods["conversations.history"] = "missing_scope"

    clock.advance(minutes=1)
    assert await engine.outbox.redeliver(timedelta(seconds=30)) == (1, 0)
    assert [m["text"] for m in api.posted["D1"]] == ["You said: hello there"] * 2
    assert "missing_scope" in caplog.text


async def test_a_first_delivery_does_not_read_the_channel(slack):
    """Looking costs a history call (rate-limited by Slack): only retries look."""
    rig = slack
    await rig.dispatch(slack_message(text="hi"))
    assert rig.api.called("chat.postMessage") and not rig.api.called("conversations.history")


async def test_a_process_retries_only_the_replies_of_the_platforms_it_serves(
    slack, engine, sessions, clock, caplog
):
    """This process serves Slack: a Discord member's reply that waits is another process's
    to send (and a terminal member's waits for their next chat), not a failure every minute."""
    rig = slack
    for tenant, user in (("discord:1", "D7"), ("local", "ana")):
        scope = await engine.agent(tenant, user)
        await engine.submit(scope, InboundEvent(EventKind.USER_MESSAGE, "hi", f"k:{tenant}"))
        await engine.drain(scope)  # answered; nobody sent it
    clock.advance(minutes=1)
    assert await engine.outbox.redeliver(timedelta(seconds=30)) == (0, 0)
    async with sessions() as session:
        waiting = (await session.scalars(select(Reply))).all()
    assert len(waiting) == 2 and all(r.delivered_at is None and r.attempts == 0 for r in waiting)
    assert "failed" not in caplog.text and not rig.api.called("chat.postMessage")
