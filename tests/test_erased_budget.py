"""A member's daily budget should hold through their own erase: "forget me" (or a reset)
should not hand a member over their budget a fresh one for the same day.

Found (rights8): it does. `usage` rows belong to the agent (foreign key, cascade), so an
erase deletes what the member spent today, and the member's and the community's daily
budgets count from zero again; `companion usage` loses those calls too. Keeping the day's
spend needs usage that outlives the agent (a schema change): left to the lead.
"""

import pytest

from core.config import EngineConfig
from core.events import EventKind, InboundEvent
from core.members.service import Members

BUDGET = "thinking budget for our chats"


def msg(text: str) -> InboundEvent:
    return InboundEvent(EventKind.USER_MESSAGE, text)


@pytest.mark.xfail(strict=True, reason="an erase deletes the day's usage: a fresh budget")
@pytest.mark.parametrize("erase", ["forget", "reset"])
async def test_an_erase_does_not_reset_the_days_budget(make_engine_for, sessions, clock, erase):
    engine = make_engine_for(EngineConfig(member_daily_tokens=1000, rate_limit=None))
    scope = await engine.agent("t", "u")
    await engine.converse(scope, msg("one"))
    assert BUDGET in (await engine.converse(scope, msg("two"))).replies[0]
    members = Members(sessions, EngineConfig(), clock)
    if erase == "forget":
        assert await members.forget("t", "u")
    else:
        assert await members.admin_reset("t", "admin", "u")
    again = await engine.agent("t", "u")
    assert BUDGET in (await engine.converse(again, msg("three"))).replies[0]
