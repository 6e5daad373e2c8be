"""A community's own limits, set by its admins within the operator's ceilings, and the
welcome text its admins want: what members notice when they reach them."""

from __future__ import annotations

import pytest

from adapters.common import WELCOME_EVENT, Services, set_limits, welcome_text
from core.config import EngineConfig, within_ceilings
from core.errors import BadSetting
from core.events import EventKind, InboundEvent
from core.members.community import Community
from core.members.service import Members
from core.prices import Price
from core.runtime.budgets import BUDGET_REPLY, RATE_REPLY


def msg(text: str) -> InboundEvent:
    return InboundEvent(EventKind.USER_MESSAGE, text)


def test_a_community_limit_never_rises_above_the_operators():
    operator = EngineConfig(rate_limit=30, member_daily_tokens=None, tenant_daily_tokens=50_000)
    mine = within_ceilings(
        operator, {"rate_limit": 5, "member_daily_tokens": 900, "tenant_daily_tokens": 80_000}
    )
    assert (mine.rate_limit, mine.member_daily_tokens, mine.tenant_daily_tokens) == (
        5,
        900,
        50_000,
    )
    assert within_ceilings(operator, {"rate_limit": None}) == operator


async def test_admins_lower_the_budget_and_members_notice(make_engine_for, clock):
    engine = make_engine_for(EngineConfig(rate_limit=30, tenant_daily_tokens=1_000_000))
    community = Community(engine.sessions, engine.mind.config, clock)
    with pytest.raises(BadSetting, match="at most 1,000,000, the operator's ceiling"):
        await community.change_limits("g", "admin1", {"tenant_daily_tokens": "2000000"})
    with pytest.raises(BadSetting, match="messages one member may send per hour must be a number"):
        await community.change_limits("g", "admin1", {"rate_limit": "lots"})
    await community.change_limits("g", "admin1", {"rate_limit": "2", "member_daily_tokens": ""})
    ana = await engine.agent("g", "ana")
    replies = [(await engine.converse(ana, msg(f"hi {n}"))).replies[0] for n in range(3)]
    assert replies[:2] == ["You said: hi 0", "You said: hi 1"]
    assert replies[2] == RATE_REPLY.format(limit=2, window="hour")
    other = await engine.agent("elsewhere", "ana")  # another community keeps the operator's
    assert [(await engine.converse(other, msg(f"yo {n}"))).replies[0] for n in range(3)] == [
        "You said: yo 0",
        "You said: yo 1",
        "You said: yo 2",
    ]

    await community.change_limits("g", "admin1", {"tenant_daily_tokens": "100"})
    ben = await engine.agent("g", "ben")
    assert (await engine.converse(ben, msg("hello"))).replies == [
        BUDGET_REPLY.format(whose=" for this community")
    ]
    limits = {limit.key: limit for limit in await community.limits("g")}
    assert limits["tenant_daily_tokens"].value == 100
    assert limits["tenant_daily_tokens"].ceiling == 1_000_000
    log = await Members(engine.sessions, engine.mind.config, clock).audit_log("g")
    assert [e.action for e in log] == ["limits", "limits"]


async def test_dollar_budgets_need_a_price(make_engine_for, clock):
    engine = make_engine_for(EngineConfig())
    community = Community(engine.sessions, engine.mind.config, clock)
    with pytest.raises(BadSetting, match="needs a price"):
        await community.change_limits("g", "admin1", {"tenant_daily_usd": "2.50"})


async def test_the_welcome_says_what_the_admins_asked(engine, fake, members, clock):
    community = Community(engine.sessions, engine.mind.config, clock)
    form = {
        "welcome": "on",
        "openers": "on",
        "quiet_hours": "22:00-09:00",
        "inactivity_hours": "72",
        "max_unanswered": "1",
        "upkeep": "off",
        "welcome_text": "Start in #introductions and read #rules.",
    }
    await community.change_settings("g", "admin1", form)
    services = Services(engine, members)
    asked = await services.welcome_event("g", "Nia")
    assert asked == welcome_text("Nia", "Start in #introductions and read #rules.")
    assert asked.startswith(WELCOME_EVENT.format(name="Nia"))
    with pytest.raises(BadSetting, match="over its limit of 1000"):
        await community.change_settings("g", "admin1", {**form, "welcome_text": "x" * 1001})
    await community.change_settings("g", "admin1", {**form, "welcome": "off"})
    assert await services.welcome_event("g", "Nia") is None


async def test_a_large_limit_does_not_lock_the_others(make_engine_for, clock):
    """A budget of a million tokens, set by slash command, leaves the other limits settable
    (it came back to the form as '1e+06', which no token limit parses)."""
    engine = make_engine_for(EngineConfig(rate_limit=30))
    community = Community(engine.sessions, engine.mind.config, clock)
    said = await set_limits(community, "g", "admin1", {"community_tokens": "2000000"})
    assert said.startswith("Saved.") and "2,000,000" in said
    said = await set_limits(community, "g", "admin1", {"messages": "5"})
    assert said.startswith("Saved."), said
    limits = {limit.key: limit.value for limit in await community.limits("g")}
    assert (limits["rate_limit"], limits["tenant_daily_tokens"]) == (5, 2_000_000)


@pytest.mark.parametrize("value", ["nan", "inf", "1e400", "-inf"])
async def test_a_dollar_limit_that_is_no_number_is_refused(make_engine_for, clock, value):
    engine = make_engine_for(EngineConfig(price=Price(1.0, 0.5, 2.0)))
    community = Community(engine.sessions, engine.mind.config, clock)
    said = await set_limits(community, "g", "admin1", {"member_dollars": value})
    assert said.startswith("Not saved:") and "must be a number" in said, said
    assert [limit.value for limit in await community.limits("g")] == [None] * 5
