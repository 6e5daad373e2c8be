"""Scheduled interrupts with a fixed clock: openers that are grounded, polite and single."""

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, update

from core.config import EngineConfig, ScheduleConfig
from core.errors import NoPlatform
from core.events import EventKind, InboundEvent
from core.members.service import Members
from core.models import Agent
from core.runtime.tick import tick
from core.tenant_key import TenantKey
from tests.fake_openai import (
    calls,
    completion,
    is_summary_request,
    last,
    say,
    summary_of,
    tool_call,
)

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)  # a Monday noon, UTC


def brain(body):
    if is_summary_request(body):
        return summary_of(body)
    newest = last(body)
    content = newest.get("content") or ""
    if newest["role"] == "tool":
        recent = str(body["messages"][-4:])
        if "conversation opener" in recent or "memory upkeep" in recent:
            return completion(None)  # done, nothing to say
        return say("ok")
    if "[scheduled interrupt] conversation opener" in content:
        system = body["messages"][0]["content"]
        if "Lisbon" in system:
            return say("How was the trip to Lisbon?")
        return calls(tool_call("core_memory_append", label="persona", content="Stayed quiet."))
    if "[scheduled interrupt] memory upkeep" in content:
        return calls(tool_call("send_message", message="hi from upkeep"))
    if content.startswith("remember that"):
        return calls(tool_call("core_memory_append", label="human", content=content[14:]))
    return say("hello!")


class Platform:
    """The members' platform (Discord) as the scheduler sees it: records every direct
    message; a tenant of no platform (the terminal's) it cannot reach."""

    def __init__(self):
        self.sent = []

    def served(self):
        return frozenset({"discord"})

    def direct(self, tenant, user):
        if TenantKey.parse(tenant).platform != "discord":
            raise NoPlatform(tenant)

        async def send(text, posting=None):
            self.sent.append((tenant, user, text))

        return send

    def reply_route(self, tenant, user, meta):
        return self.direct(tenant, user)


@pytest.fixture
def platform():
    return Platform()


@pytest.fixture
def engine(make_engine_for, platform):
    return make_engine_for(platforms=platform)


async def chat(engine, user, text, tenant="discord:1"):
    scope = await engine.agent(tenant, user)
    await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, text))
    return scope


async def next_opener_at(sessions, scope):
    async with sessions() as session:
        return await session.scalar(select(Agent.next_opener_at).where(Agent.id == scope.agent_id))


async def test_a_quiet_member_gets_one_grounded_opener(engine, platform, fake, clock, sessions):
    fake.brain = brain
    clock.now = T0
    scope = await chat(engine, "ana", "remember that I am flying to Lisbon on Friday")
    due = await next_opener_at(sessions, scope)
    assert T0 + timedelta(days=3) <= due <= T0 + timedelta(days=3, hours=6)
    assert (await tick(engine, T0 + timedelta(days=1))).claimed == []
    clock.now = due + timedelta(minutes=1)
    report = await tick(engine, clock.now)
    assert [c.purpose for c in report.claimed] == ["opener"] and report.sent == 1
    assert platform.sent == [("discord:1", "ana", "How was the trip to Lisbon?")]
    request = fake.chat_requests[-1]
    assert "I am flying to Lisbon on Friday" in request["messages"][0]["content"]
    interrupt = last(request)["content"]
    assert "Thursday 05 March" in interrupt and "3 days ago" in interrupt
    # The unanswered cap (1): nothing more until ana writes again.
    clock.now += timedelta(days=10)
    assert (await tick(engine, clock.now)).claimed == []
    await chat(engine, "ana", "back home now!")
    assert await next_opener_at(sessions, scope) > clock.now


async def test_an_agent_with_nothing_to_say_stays_silent(engine, platform, fake, clock, sessions):
    fake.brain = brain
    clock.now = T0
    scope = await chat(engine, "bo", "hi")
    clock.now = await next_opener_at(sessions, scope) + timedelta(minutes=1)
    report = await tick(engine, clock.now)
    assert report.silent == 1 and platform.sent == []
    async with sessions() as session:
        agent = await session.get(Agent, scope.agent_id)
    assert agent.openers_unanswered == 0 and agent.next_opener_at is not None


async def test_opt_out_takes_effect_at_once(engine, fake, clock, sessions):
    fake.brain = brain
    clock.now = T0
    scope = await chat(engine, "cy", "remember that I run in Lisbon")
    due = await next_opener_at(sessions, scope)
    members = Members(sessions, EngineConfig(), clock)
    await members.settings("discord:1", "cy", openers=False)
    assert await next_opener_at(sessions, scope) is None
    before = len(fake.requests)
    assert (await tick(engine, due + timedelta(hours=1))).claimed == []
    assert len(fake.requests) == before
    await members.settings("discord:1", "cy", openers=True)
    assert await next_opener_at(sessions, scope) == due


async def test_quiet_hours_in_the_members_time_zone(engine, fake, clock, sessions):
    fake.brain = brain
    clock.now = datetime(2026, 3, 2, 13, 30, tzinfo=UTC)  # 22:30 in Tokyo
    members = Members(sessions, EngineConfig(), clock)
    await members.settings("discord:1", "dai", timezone="Asia/Tokyo")
    scope = await chat(engine, "dai", "remember that I like Lisbon tarts")
    due = await next_opener_at(sessions, scope)
    local = due.astimezone(__import__("zoneinfo").ZoneInfo("Asia/Tokyo"))
    assert 9 <= local.hour < 22, local


async def test_two_processes_claiming_at_once_send_one_opener(
    make_engine_for, platform, fake, clock, sessions
):
    fake.brain = brain
    first, second = make_engine_for(platforms=platform), make_engine_for(platforms=platform)
    clock.now = T0
    scope = await chat(first, "eve", "remember that Lisbon is my home town")
    now = await next_opener_at(sessions, scope) + timedelta(minutes=1)
    reports = await asyncio.gather(*(tick(e, now) for e in (first, second, first)))
    assert sum(len(r.claimed) for r in reports) == 1
    assert len(platform.sent) == 1
    openers = [b for b in fake.chat_requests if "conversation opener" in str(last(b))]
    assert len(openers) == 1


async def test_catch_up_after_downtime_is_spread_out(engine, platform, fake, clock, sessions):
    fake.brain = brain
    clock.now = T0
    for i in range(12):
        await chat(engine, f"m{i}", "remember that I love Lisbon")
    restart = T0 + timedelta(days=6)  # the bot was down while all of them fell due
    first = await tick(engine, restart)
    assert first.claimed == [] and platform.sent == []
    assert len(first.respread) == 12  # moved, and the report says so
    assert all(restart < at <= restart + timedelta(hours=3, minutes=1) for at in first.respread)
    moments = restart
    for _ in range(20):  # a tick every 15 minutes for five hours
        moments += timedelta(minutes=15)
        clock.now = moments
        await tick(engine, moments)
    users = [user for _, user, _ in platform.sent]
    assert sorted(users) == sorted(f"m{i}" for i in range(12)), "each exactly once"
    async with sessions() as session:
        left = await session.scalar(
            select(Agent.id).where(Agent.next_opener_at.is_not(None)).limit(1)
        )
    assert left is None


async def test_restart_loses_nothing_claimed(engine, make_engine_for, fake, clock, sessions):
    """A process that claimed an opener and died before thinking: the next pass finishes it."""
    fake.brain = brain
    clock.now = T0
    scope = await chat(engine, "fay", "remember that I am in Lisbon")
    now = await next_opener_at(sessions, scope) + timedelta(minutes=1)
    from core.schedule.planning import claim_due

    async with sessions() as session, session.begin():
        claims = (await claim_due(session, now, ScheduleConfig())).claimed
    assert len(claims) == 1  # ...and the process dies here
    fresh = make_engine_for()
    assert await fresh.resume() == 1
    assert await fresh.outbox.undelivered(claims[0].event_id) == ["How was the trip to Lisbon?"]


async def test_upkeep_runs_when_idle_and_cannot_message(
    make_engine_for, platform, fake, clock, sessions
):
    fake.brain = brain
    config = EngineConfig(schedule=ScheduleConfig(upkeep=True))
    engine = make_engine_for(config, platforms=platform)
    clock.now = T0
    await chat(engine, "gus", "hello")
    report = await tick(engine, T0 + timedelta(hours=2, minutes=1))
    assert [c.purpose for c in report.claimed] == ["upkeep"]
    assert platform.sent == [] and await engine.outbox.undelivered(report.claimed[0].event_id) == []
    tool_results = [m["content"] for m in fake.chat_requests[-1]["messages"] if m["role"] == "tool"]
    assert any("cannot message" in r for r in tool_results)
    steps = [b for b in fake.chat_requests if "memory upkeep" in str(b["messages"])]
    assert len(steps) <= config.schedule.upkeep_steps


async def test_openers_for_terminal_members_wait_in_the_outbox(engine, fake, clock, sessions):
    fake.brain = brain
    clock.now = T0
    scope = await chat(engine, "hal", "remember that Lisbon calls", tenant="local")
    now = await next_opener_at(sessions, scope) + timedelta(minutes=1)
    report = await tick(engine, now)
    assert report.undelivered == 1
    assert await engine.outbox.take_waiting(scope) == ["How was the trip to Lisbon?"]
    assert await engine.outbox.take_waiting(scope) == []


async def test_claimed_openers_think_side_by_side(engine, platform, fake, clock, sessions):
    """Issue 29: claimed openers ran one after another in the timer job (with a 2 s model,
    one opener per 2 s per process). Now the model is asked for all of them at once: this
    brain answers only once two opener calls are waiting together."""
    fake.brain = brain
    clock.now = T0
    scopes = [
        await chat(engine, name, "remember that I am flying to Lisbon on Friday")
        for name in ("ana", "ben", "cy")
    ]
    dues = [await next_opener_at(sessions, scope) for scope in scopes]
    due = min(dues)
    async with sessions() as session, session.begin():  # all three due at the same minute
        for scope, own in zip(scopes, dues, strict=True):
            await session.execute(
                update(Agent)
                .where(Agent.id == scope.agent_id)
                .values(last_active_at=Agent.last_active_at - (own - due), next_opener_at=due)
            )
    waiting, together = 0, asyncio.Event()

    async def all_at_once(body):
        nonlocal waiting
        if "[scheduled interrupt] conversation opener" in (last(body).get("content") or ""):
            waiting += 1
            if waiting == 2:
                together.set()
            await asyncio.wait_for(together.wait(), 10)  # one at a time: never two
        return brain(body)

    fake.brain = all_at_once
    clock.now = due + timedelta(minutes=1)
    report = await tick(engine, clock.now)
    assert len(report.claimed) >= 2 and report.sent == len(report.claimed)
    assert together.is_set()
    assert sorted(user for _, user, _ in platform.sent) == sorted(c.user for c in report.claimed)


async def test_an_opener_that_meets_a_model_that_is_down_is_not_reported_silent(
    engine, platform, fake, clock, sessions
):
    """Found (rights8): the pass reported it as "1 silent", the agent's choice to say
    nothing, while the model was down and the opener had not run at all."""
    from bot.operator import tick_summary

    fake.brain = brain
    clock.now = T0
    scope = await chat(engine, "ida", "remember that I am flying to Lisbon on Friday")
    clock.now = await next_opener_at(sessions, scope) + timedelta(minutes=1)
    fake.down = 503
    report = await tick(engine, clock.now)
    assert (report.sent, report.silent, report.waiting) == (0, 0, 1)
    assert "1 waiting for the model" in tick_summary(report, clock.now)
    assert platform.sent == []
