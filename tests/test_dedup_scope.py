"""Dedup keys belong to one member's agent, and a reply only ever goes out through its own
member's channel.

A platform id is not a member's: the same Slack file shared into two DMs keeps its file id,
so two members can send events with the same dedup key. Each must be stored and answered
for that member, and neither may ever receive the other's reply.
"""

import logging

from sqlalchemy import select, text

from core.events import EventKind, InboundEvent
from core.models import Event, Passage, Reply
from tests.fake_openai import last, say

FILE = b"Packing list\nThe heron lives by the old mill pond.\n"


def thanks(body):
    newest = last(body)
    return say(f"Thanks, {newest['content'][:60]}")


class Channel:
    """One member's DM: what was posted into it."""

    def __init__(self, fail: bool = False) -> None:
        self.posted: list[str] = []
        self.fail = fail

    async def __call__(self, reply: str, posting: object = None) -> None:
        if self.fail:
            raise ConnectionError("platform down")
        self.posted.append(reply)


async def test_a_file_shared_by_two_members_is_stored_and_answered_for_each(engine, fake, sessions):
    fake.brain = thanks
    ann, bob = await engine.agent("slack:T1", "ann"), await engine.agent("slack:T1", "bob")
    to_ann, to_bob = Channel(), Channel()
    first = await engine.upload(ann, "trip.txt", FILE, dedup_key="slack:file:F1", send=to_ann)
    second = await engine.upload(bob, "trip.txt", FILE, dedup_key="slack:file:F1", send=to_bob)
    assert second.event_id != first.event_id
    assert to_ann.posted and to_bob.posted
    async with sessions() as session:
        owners = list(await session.scalars(select(Passage.agent_id).distinct()))
        events = list(await session.scalars(select(Event.agent_id).order_by(Event.id)))
    assert sorted(owners) == sorted([ann.agent_id, bob.agent_id])
    assert events == [ann.agent_id, bob.agent_id]
    # A redelivery of bob's share is still his one event, answered once.
    again = await engine.upload(bob, "trip.txt", FILE, dedup_key="slack:file:F1", send=to_bob)
    assert again.event_id == second.event_id and again.replies == []


async def test_the_same_message_key_from_two_members_reaches_each(engine, fake):
    fake.brain = thanks
    ann, bob = await engine.agent("slack:T1", "ann"), await engine.agent("slack:T1", "bob")
    said = {}
    for scope, words in ((ann, "ann here"), (bob, "bob here")):
        event = InboundEvent(EventKind.USER_MESSAGE, words, dedup_key="slack:D1:1700000000.1")
        said[words] = await engine.converse(scope, event)
    assert said["ann here"].event_id != said["bob here"].event_id
    assert "bob here" in said["bob here"].replies[0]


async def test_without_row_security_a_pending_reply_never_crosses_to_another_member(
    engine, fake, sessions, schema
):
    """The managed-Postgres fallback (no second wall): the queries alone must hold."""
    async with sessions() as session, session.begin():
        for table in ("events", "outbox"):
            await session.execute(text(f"ALTER TABLE {schema}.{table} NO FORCE ROW LEVEL SECURITY"))
            await session.execute(text(f"ALTER TABLE {schema}.{table} DISABLE ROW LEVEL SECURITY"))
    fake.brain = thanks
    ann, bob = await engine.agent("slack:T1", "ann"), await engine.agent("slack:T1", "bob")
    down, to_bob = Channel(fail=True), Channel()
    try:
        await engine.upload(ann, "trip.txt", FILE, dedup_key="slack:file:F1", send=down)
    except ConnectionError:
        pass  # ann's reply waits in the outbox for a retry
    await engine.upload(bob, "trip.txt", FILE, dedup_key="slack:file:F1", send=to_bob)
    assert len(to_bob.posted) == 1  # his own thanks, not ann's pending one as well
    async with sessions() as session:
        waiting = list(
            await session.scalars(select(Reply.agent_id).where(Reply.delivered_at.is_(None)))
        )
    assert waiting == [ann.agent_id]


async def test_deliver_refuses_a_reply_of_another_member(engine, fake, sessions, caplog):
    fake.brain = thanks
    ann, bob = await engine.agent("slack:T1", "ann"), await engine.agent("slack:T1", "bob")
    down, to_bob = Channel(fail=True), Channel()
    try:
        await engine.converse(ann, InboundEvent(EventKind.USER_MESSAGE, "ann secret"), send=down)
    except ConnectionError:
        pass
    async with sessions() as session:
        event_id = await session.scalar(
            select(Reply.event_id).where(Reply.agent_id == ann.agent_id)
        )
    with caplog.at_level(logging.ERROR):
        sent = await engine.outbox.deliver(bob, event_id, to_bob)
    assert sent == [] and to_bob.posted == []
    assert any(
        r.levelno == logging.ERROR and str(event_id) in r.getMessage() for r in caplog.records
    )
    # Ann's reply is still there for ann.
    to_ann = Channel()
    assert await engine.outbox.deliver(ann, event_id, to_ann) == to_ann.posted
    assert "ann secret" in to_ann.posted[0]
