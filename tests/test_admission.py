"""Where a community's companion answers and whom, in core: the rule, its refusals, how
long a process keeps it, and a block that outlives the member's own "forget me"."""

from __future__ import annotations

import pytest

from core.companion import MAX_CHANNELS, Reach, Where, channel_ids
from core.errors import BadSetting
from core.members.admission import BLOCKED_NOTICE, Admission


def test_the_rule_of_where_it_answers():
    anywhere = Reach()
    assert anywhere.answers(Where("C1")) and anywhere.answers(Where(None))
    assert not anywhere.answers(Where("C1", addressed=False))
    rules = Reach(channels=("C1", "C2"), never=("C3",), open_channel="C2", dms=False)
    assert rules.answers(Where("C1")) and not rules.answers(Where("C9"))
    assert rules.answers(Where("T1", parents=("C1",)))  # a thread of an allowed channel
    assert not rules.answers(Where("T3", parents=("C3",)))  # nor one of a never channel
    assert rules.answers(Where("C2", addressed=False))
    assert not rules.answers(Where("C1", addressed=False))
    assert not rules.answers(Where(None))


def test_channel_lists_as_admins_type_them():
    assert channel_ids("C1, C2 <#C3|general>  1234567890 C1") == ("C1", "C2", "C3", "1234567890")
    with pytest.raises(BadSetting, match="'#gen-eral' is not a channel id"):
        channel_ids("C1 #gen-eral")


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_another_process_sees_a_change_within_the_ttl(engine, clock):
    ticks = Ticks()
    here = Admission(engine.sessions, engine.mind.config, clock, ticks)
    there = Admission(engine.sessions, engine.mind.config, clock, ticks)
    assert (await there.reach("g")).dms
    await here.change_reach("g", "admin1", dms=False)
    assert not (await here.reach("g")).dms  # at once where it was changed
    assert (await there.reach("g")).dms  # kept a while elsewhere...
    ticks.now += 10.5
    assert not (await there.reach("g")).dms  # ...for at most 10 seconds


async def test_a_channel_cannot_be_both_allowed_and_never(engine, clock):
    admission = Admission(engine.sessions, engine.mind.config, clock)
    await admission.place("g", "admin1", "C1", "answer", "#one")
    with pytest.raises(BadSetting, match="C1 cannot be both"):
        await admission.change_reach("g", "admin1", never=("C1",))
    rules = await admission.place("g", "admin1", "C1", "never")  # moving it is fine
    assert (rules.channels, rules.never, rules.name_of("C1")) == ((), ("C1",), "#one")
    with pytest.raises(BadSetting, match="answer, never, open, default"):
        await admission.place("g", "admin1", "C1", "sometimes")


async def test_a_block_outlives_the_members_own_forget_me(engine, members):
    scope = await engine.agent("g", "ana")
    assert scope is not None
    await members.admission.block("g", "admin1", "ana", True)
    assert (await members.admission.admit("g", "ana", Where("C1"))).notice == BLOCKED_NOTICE
    assert await members.forget("g", "ana")
    assert await members.view("g", "ana") is None  # the memory is gone
    again = await members.admission.admit("g", "ana", Where("C1"))
    assert not again.answer and again.notice is None  # still blocked, already told
    assert [b.user for b in await members.admission.blocked("g")] == ["ana"]


async def test_slash_commands_name_no_more_channels_than_the_admin_pages_take(members):
    """One channel at a time (a slash command) stops where the admin pages' lists do, or
    the pages could no longer save the rules (and every message scans a longer list)."""
    admission = members.admission
    for n in range(MAX_CHANNELS):
        await admission.place("t", "admin1", f"C{n}", "never")
    with pytest.raises(BadSetting, match=f"at most {MAX_CHANNELS} channels"):
        await admission.place("t", "admin1", "C999", "never")
    with pytest.raises(BadSetting, match=f"at most {MAX_CHANNELS} channels"):
        await admission.change_reach("t", "admin1", channels=tuple(f"A{n}" for n in range(51)))
    reach = await admission.reach("t")
    assert len(reach.never) == MAX_CHANNELS and "C999" not in reach.never
    await admission.place("t", "admin1", "C0", "answer")  # moving one stays possible
