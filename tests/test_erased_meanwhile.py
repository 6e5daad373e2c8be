"""A member erased (reset, forget) while the engine works for them: whatever it was doing
for them stops, unwritten and unsent, and nobody else's work is held up by it."""

import asyncio
from datetime import timedelta

from sqlalchemy import func, select, update

from core.config import EngineConfig
from core.events import EventKind, InboundEvent
from core.members.service import Members
from core.models import Agent, Event, Message, Reply
from core.runtime import tick as ticking
from tests.fake_openai import say
from tests.test_openers import T0, Platform, brain, chat, next_opener_at


async def rows(sessions, model, agent_id):
    async with sessions() as session:
        return await session.scalar(
            select(func.count()).select_from(model).where(model.agent_id == agent_id)
        )


async def test_a_reset_while_the_model_thinks_stops_the_turn_quietly(
    make_engine_for, fake, clock, sessions
):
    platform = Platform()
    engine = make_engine_for(platforms=platform)
    clock.now = T0
    thinking, answer = asyncio.Event(), asyncio.Event()

    async def slow(body):
        if "my secret plan" in str(body["messages"][-1]):
            thinking.set()
            await answer.wait()
            return say("I will keep your secret plan")
        return brain(body)

    fake.brain = slow
    scope = await chat(engine, "ana", "hello")
    turn = asyncio.create_task(
        engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, "my secret plan"))
    )
    await asyncio.wait_for(thinking.wait(), 10)
    members = Members(sessions, EngineConfig(), clock)
    assert await members.admin_reset("discord:1", "admin", "ana")
    answer.set()
    exchange = await asyncio.wait_for(turn, 20)  # was: AssertionError "agent 1 vanished"
    assert exchange.replies == []
    for model in (Message, Event, Reply):
        assert await rows(sessions, model, scope.agent_id) == 0
    doc = await members.export("discord:1", "ana")
    assert "secret" not in str(doc) and platform.sent == []


async def test_a_reset_between_an_openers_claim_and_its_turn_holds_up_nobody(
    make_engine_for, fake, clock, sessions, monkeypatch
):
    platform = Platform()
    engine = make_engine_for(platforms=platform)
    fake.brain = brain
    clock.now = T0
    scopes = [
        await chat(engine, name, "remember that I am flying to Lisbon on Friday")
        for name in ("ana", "bob")
    ]
    dues = [await next_opener_at(sessions, scope) for scope in scopes]
    due = min(dues)
    async with sessions() as session, session.begin():  # both due at the same minute
        for scope, own in zip(scopes, dues, strict=True):
            await session.execute(
                update(Agent)
                .where(Agent.id == scope.agent_id)
                .values(last_active_at=Agent.last_active_at - (own - due), next_opener_at=due)
            )
    members = Members(sessions, EngineConfig(), clock)
    run = ticking._run

    async def reset_ana_first(engine, claim):
        if claim.user == "ana":  # claimed, committed, then reset by an admin
            assert await members.admin_reset("discord:1", "admin", "ana")
        return await run(engine, claim)

    monkeypatch.setattr(ticking, "_run", reset_ana_first)
    clock.now = due + timedelta(minutes=1)
    report = await ticking.tick(engine, clock.now)  # was: AssertionError, the pass lost
    assert sorted(claim.user for claim in report.claimed) == ["ana", "bob"]
    assert report.sent == 1
    assert platform.sent == [("discord:1", "bob", "How was the trip to Lisbon?")]
    assert await rows(sessions, Event, scopes[0].agent_id) == 0
