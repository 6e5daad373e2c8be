"""Budgets: a member's message rate and daily token budgets, with a polite answer and
nothing lost."""

from datetime import timedelta

from sqlalchemy import select

from core.config import EngineConfig
from core.events import EventKind, InboundEvent
from core.models import Event, Message, Usage


def msg(text):
    return InboundEvent(EventKind.USER_MESSAGE, text)


async def test_rate_limit_answers_politely_and_keeps_the_message(
    make_engine_for, fake, clock, sessions
):
    engine = make_engine_for(EngineConfig(rate_limit=3, rate_window=timedelta(hours=1)))
    scope = await engine.agent("t", "u")
    replies = [(await engine.converse(scope, msg(f"m{i}"))).replies[0] for i in range(5)]
    assert replies[:3] == ["You said: m0", "You said: m1", "You said: m2"]
    assert all("faster than I can keep up" in r for r in replies[3:])
    assert len(fake.chat_requests) == 3
    async with sessions() as session:
        said = list(
            await session.scalars(
                select(Message.content).where(Message.role == "user").order_by(Message.id)
            )
        )
        statuses = list(await session.scalars(select(Event.status).order_by(Event.id)))
    assert said == [f"m{i}" for i in range(5)]
    assert statuses == ["done"] * 3 + ["limited"] * 2
    clock.advance(hours=1, minutes=1)
    assert (await engine.converse(scope, msg("later"))).replies == ["You said: later"]


async def test_tenant_daily_budget_stops_one_community_until_tomorrow(
    make_engine_for, fake, clock, sessions
):
    engine = make_engine_for(EngineConfig(tenant_daily_tokens=2500, rate_limit=None))
    ann = await engine.agent("guild-1", "ann")
    bob = await engine.agent("guild-1", "bob")
    other = await engine.agent("guild-2", "cy")
    first = await engine.converse(ann, msg("hello"))  # a fresh agent's turn: ~1,100 tokens
    assert first.replies == ["You said: hello"]
    await engine.converse(bob, msg("hi"))
    await engine.converse(ann, msg("again"))
    blocked = await engine.converse(bob, msg("still there?"))
    assert "thinking budget for this community" in blocked.replies[0]
    assert (await engine.converse(other, msg("hey"))).replies == ["You said: hey"]
    async with sessions() as session:
        spent = await session.scalar(select(Usage.tokens).where(Usage.agent_id == ann.agent_id))
    assert spent > 2000
    clock.advance(days=1)
    assert (await engine.converse(bob, msg("new day"))).replies == ["You said: new day"]


async def test_member_daily_budget_and_silent_scheduled_events(make_engine_for, fake, clock):
    engine = make_engine_for(EngineConfig(member_daily_tokens=1000, rate_limit=None))
    scope = await engine.agent("t", "u")
    await engine.converse(scope, msg("one"))
    assert "thinking budget for our chats" in (await engine.converse(scope, msg("two"))).replies[0]
    opener = InboundEvent(EventKind.SCHEDULED, "conversation opener", meta={"purpose": "opener"})
    assert (await engine.converse(scope, opener)).replies == []
