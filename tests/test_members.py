"""Member and admin actions on memory: view, settings, forget me, admin export and reset."""

import pytest
from sqlalchemy import func, select

from core.errors import BadSetting
from core.events import EventKind, InboundEvent
from core.members.service import parse_quiet_hours
from core.models import Agent, Event, Message, User


async def _chat(engine, tenant, user, *texts):
    scope = await engine.agent(tenant, user)
    for text in texts:
        await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, text))
    return scope


async def test_view_shows_working_context_and_counts(engine, members):
    await _chat(engine, "g", "ann", "remember that I sail on Sundays", "hello")
    view = await members.view("g", "ann")
    human = dict((label, value) for label, value, _ in view.blocks)["human"]
    assert "I sail on Sundays" in human
    assert view.messages >= 4 and view.passages == 0
    assert await members.view("g", "nobody") is None


async def test_settings_are_validated_and_kept(members):
    saved = await members.settings(
        "g", "ann", openers=False, quiet_hours="23-7:30", timezone="Europe/Lisbon"
    )
    assert saved == {
        "openers": False,
        "quiet_hours": "23:00-07:30",
        "timezone": "Europe/Lisbon",
        "timezone_from": "member",
    }
    with pytest.raises(BadSetting, match="time zone"):
        await members.settings("g", "ann", timezone="Mars/Olympus")
    with pytest.raises(BadSetting):
        await members.settings("g", "ann", quiet_hours="late")
    assert (await members.view("g", "ann")).timezone == "Europe/Lisbon"


@pytest.mark.parametrize("bad", ["25:00-07:00", "22:61-01:00", "10pm-7am", ""])
def test_quiet_hours_parse_errors(bad):
    with pytest.raises(BadSetting):
        parse_quiet_hours(bad)


async def test_forget_me_erases_one_member_entirely(engine, members, sessions):
    ann = await _chat(engine, "g", "ann", "remember that my PIN hint is heron", "bye")
    bob = await _chat(engine, "g", "bob", "remember that I like jazz")
    async with sessions() as session:
        bob_before = await session.scalar(
            select(func.count()).where(Message.agent_id == bob.agent_id)
        )
    assert await members.forget("g", "ann")
    async with sessions() as session:
        for model in (Message, Event):
            left = await session.scalar(select(func.count()).where(model.agent_id == ann.agent_id))
            assert left == 0
        assert await session.get(Agent, ann.agent_id) is None
        assert await session.scalar(select(User).where(User.external_id == "ann")) is None
        bob_after = await session.scalar(
            select(func.count()).where(Message.agent_id == bob.agent_id)
        )
    assert bob_after == bob_before > 0
    assert not await members.forget("g", "ann")


async def test_admin_actions_are_audited(engine, members):
    await _chat(engine, "g", "ann", "remember that I like tea")
    doc = await members.admin_export("g", "admin-1", "ann")
    assert any("tea" in (m["content"] or "") for m in doc["messages"])
    assert await members.admin_reset("g", "admin-1", "ann")
    assert not await members.admin_reset("g", "admin-1", "ghost")
    log = await members.audit_log("g")
    assert [(e.actor, e.action, e.target, e.detail["found"]) for e in reversed(log)] == [
        ("admin-1", "export", "ann", True),
        ("admin-1", "reset", "ann", True),
        ("admin-1", "reset", "ghost", False),
    ]
    fresh = await members.view("g", "ann")
    assert fresh.messages == 0 and "tea" not in str(fresh.blocks)


async def test_a_profile_zone_is_taken_once_and_again_after_the_member_is_erased(
    engine, members, clock
):
    asked: list[str] = []

    async def profile() -> str:
        asked.append("asked")
        return "America/Chicago"

    await engine.agent("t", "ana")
    for _ in range(3):
        await members.zones.adopt("t", "ana", profile)
    assert asked == ["asked"] and (await members.view("t", "ana")).timezone == "America/Chicago"

    await members.settings("t", "ana", timezone="Europe/Berlin")
    clock.advance(hours=1)
    await members.zones.adopt("t", "ana", profile)  # the member's own choice stays
    assert asked == ["asked"] and (await members.view("t", "ana")).timezone == "Europe/Berlin"

    await members.forget("t", "ana")
    await engine.agent("t", "ana")
    clock.advance(minutes=11)  # the process looks again after RECHECK
    await members.zones.adopt("t", "ana", profile)
    assert asked == ["asked", "asked"]
    assert (await members.view("t", "ana")).timezone == "America/Chicago"
