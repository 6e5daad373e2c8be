"""What the inspector reads and changes, through the services: one member's memory page by
page, edits within the model's own limits, and a tenant at a glance for its admins."""

from datetime import date

import pytest
from sqlalchemy import select

from core.config import EngineConfig
from core.errors import BadSetting, BlockRefused
from core.events import EventKind, InboundEvent
from core.members.community import Community
from core.members.service import Members
from core.models import Agent, Passage

T = "discord:1"


@pytest.fixture
def members(sessions, clock):
    return Members(sessions, EngineConfig(), clock)


@pytest.fixture
def community(sessions, clock):
    return Community(sessions, EngineConfig(), clock)


async def chat(engine, user, *texts, tenant=T):
    scope = await engine.agent(tenant, user)
    for text in texts:
        await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, text))
    return scope


async def upload(engine, user, name, text, tenant=T):
    scope = await engine.agent(tenant, user)
    await engine.upload(scope, name, text.encode())
    return scope


def human(view):
    return dict((label, value) for label, value, _ in view.blocks)["human"]


async def test_a_block_edit_is_held_to_the_limit_the_model_has(engine, members):
    await chat(engine, "ann", "remember that I sail on Sundays")
    await members.edit_block(T, "ann", "human", "Ann sails on Saturdays.\r\nShe has a cat.")
    assert human(await members.view(T, "ann")) == "Ann sails on Saturdays.\nShe has a cat."
    with pytest.raises(BlockRefused, match="2001 characters, over its limit of 2000"):
        await members.edit_block(T, "ann", "human", "x" * 2001)
    with pytest.raises(BlockRefused, match="no block 'secrets'"):
        await members.edit_block(T, "ann", "secrets", "hi")
    with pytest.raises(BlockRefused, match="no memory"):
        await members.edit_block(T, "nobody", "human", "hi")
    assert human(await members.view(T, "ann")) == "Ann sails on Saturdays.\nShe has a cat."


async def test_an_edit_from_a_stale_page_does_not_overwrite_the_agent(engine, members):
    await chat(engine, "ann", "hello")
    seen = human(await members.view(T, "ann"))
    await chat(engine, "ann", "remember that I moved to Porto")  # the agent edits meanwhile
    with pytest.raises(BlockRefused, match="changed while you were editing"):
        await members.edit_block(T, "ann", "human", "Ann likes tea.", expected=seen)
    assert "Porto" in human(await members.view(T, "ann"))
    fresh = human(await members.view(T, "ann"))
    await members.edit_block(T, "ann", "human", fresh + "\nAnn likes tea.", expected=fresh)
    assert human(await members.view(T, "ann")).endswith("Ann likes tea.")


async def test_conversation_pages_back_through_what_was_said(engine, members):
    await chat(engine, "ann", *[f"message number {i}" for i in range(20)])
    newest = await members.conversation(T, "ann")
    assert len(newest.lines) == 30 and newest.older is not None
    assert newest.lines[-1].text == "You said: message number 19"
    assert [line.role for line in newest.lines[-2:]] == ["user", "assistant"]
    older = await members.conversation(T, "ann", before=newest.older)
    assert [line.text for line in older.lines][:2] == [
        "message number 0",
        "You said: message number 0",
    ]
    assert older.older is None
    assert (await members.conversation(T, "nobody")).lines == []


async def test_search_is_the_agents_own_recall_search_and_sees_only_one_member(engine, members):
    await chat(engine, "ann", "my sister lives in Lisbon", "the weather is fine")
    await chat(engine, "bob", "I was born in Lisbon")
    found = await members.search(T, "ann", "Lisbon")
    assert found.total == 2 and all("Lisbon" in hit.text for hit in found.hits)
    assert "born" not in str(found.hits)
    assert (await members.search(T, "ann", "   ")).total == 0


async def test_passages_list_with_source_and_delete_only_ones_own(engine, members, sessions):
    await upload(engine, "ann", "recipes.md", "Grandma's lemon cake needs three lemons.")
    await upload(engine, "bob", "bob.txt", "Bob's bike code is 4411.")
    page = await members.passages(T, "ann")
    assert page.total == 1 and page.rows[0].source == "recipes.md (part 1 of 1)"
    async with sessions() as session:
        bobs = (
            await session.scalars(select(Passage.id).where(Passage.source.startswith("bob.txt")))
        ).one()
    assert not await members.delete_passage(T, "ann", bobs)  # another member's id: nothing
    assert (await members.passages(T, "bob")).total == 1
    assert await members.delete_passage(T, "ann", page.rows[0].id)
    assert (await members.passages(T, "ann")).total == 0


async def test_an_admins_reads_and_edits_are_audited_and_a_members_are_not(engine, members):
    await chat(engine, "ann", "hello")
    await members.view(T, "ann")
    await members.conversation(T, "ann")
    assert await members.audit_log(T) == []
    await members.view(T, "ann", actor="mod")
    await members.search(T, "ann", "hello", actor="mod")
    await members.edit_block(T, "ann", "human", "Ann.", actor="mod")
    with pytest.raises(BlockRefused):
        await members.edit_block(T, "ann", "human", "y" * 3000, actor="mod")
    log = [(e.actor, e.action, e.target, e.detail) for e in await members.audit_log(T)]
    assert log == [
        ("mod", "edit", "ann", {"block": "human", "found": True}),
        ("mod", "search", "ann", {"query": "hello", "found": True}),
        ("mod", "view", "ann", {"page": "working context", "found": True}),
    ]  # the refused edit changed nothing, so it left no entry


async def test_opener_status_says_when_and_why(engine, members, clock):
    await chat(engine, "ann", "hello")
    status = await members.opener_status(T, "ann")
    assert status.next_at is not None and status.next_at > clock()
    assert "after their last message" in status.why
    await members.settings(T, "ann", openers=False)
    off = await members.opener_status(T, "ann")
    assert off.next_at is None and "off" in off.why
    assert await members.opener_status(T, "nobody") is None


async def test_roster_counts_messages_passages_and_tokens(engine, community, clock, sessions):
    await chat(engine, "ann", "hello", "again")
    await upload(engine, "bob", "notes.txt", "Bob keeps bees.")
    await chat(engine, "eve", "hi", tenant="discord:2")  # another tenant: never listed
    roster = {row.user: row for row in await community.roster(T)}
    assert set(roster) == {"ann", "bob"}
    ann = roster["ann"]
    assert ann.messages >= 4 and ann.passages == 0 and ann.last_active == clock()
    assert ann.tokens_today > 0 and ann.tokens_month == ann.tokens_today
    assert roster["bob"].passages == 1
    clock.advance(days=1)
    again = {row.user: row for row in await community.roster(T)}["ann"]
    assert again.tokens_today == 0 and again.tokens_month == ann.tokens_month


async def test_usage_is_per_day_zero_filled(engine, community, clock):
    await chat(engine, "ann", "hello")
    clock.advance(days=2)
    await chat(engine, "ann", "hello again")
    days = await community.usage(T, days=5)
    assert [d.day for d in days] == [
        date(2026, 2, 27 + i) if i < 2 else date(2026, 3, i - 1) for i in range(5)
    ]
    assert [d.tokens > 0 for d in days] == [False, False, True, False, True]
    assert sum(d.tokens for d in await community.usage("discord:2")) == 0


async def test_tenant_settings_are_validated_audited_and_replan_openers(
    engine, community, members, sessions
):
    await chat(engine, "ann", "hello")
    form = {
        "welcome": "off",
        "openers": "on",
        "quiet_hours": "23-8",
        "inactivity_hours": "48",
        "max_unanswered": "2",
        "upkeep": "off",
    }
    async with sessions() as session:
        before = await session.scalar(select(Agent.next_opener_at))
    saved = await community.change_settings(T, "mod", form)
    assert (saved.welcome, saved.quiet_hours, saved.inactivity_hours) == (False, "23:00-08:00", 48)
    async with sessions() as session:
        after = await session.scalar(select(Agent.next_opener_at))
    assert after < before  # 2 days instead of 3: every member's opener moved at once
    for bad, message in (
        ({"quiet_hours": "late"}, "quiet hours"),
        ({"inactivity_hours": "0"}, "from 1"),
        ({"max_unanswered": "many"}, "number"),
        ({"welcome": "maybe"}, "on or off"),
    ):
        with pytest.raises(BadSetting, match=message):
            await community.change_settings(T, "mod", {**form, **bad})
    assert (await community.settings(T)).quiet_hours == "23:00-08:00"
    log = [(e.actor, e.action, e.detail) for e in await members.audit_log(T)]
    assert log == [
        (
            "mod",
            "settings",
            {
                "welcome": False,
                "quiet_hours": "23:00-08:00",
                "opener_inactivity_hours": 48.0,
                "opener_max_unanswered": 2,
            },  # what changed; openers and upkeep stayed as they were
        )
    ]
