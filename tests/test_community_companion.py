"""The community's own companion: the name, persona and instructions its admins set reach
every member's next turn (in the stable prefix), new members' first persona, and nobody
else's memory; past the limits they are refused whole; every change is audited."""

from __future__ import annotations

import pytest

from adapters.common import set_welcome_text
from core.config import DEFAULT_PERSONA, EngineConfig
from core.errors import BadSetting
from core.events import EventKind, InboundEvent
from core.members.service import Members
from tests.fake_openai import (
    calls,
    common_prefix,
    last_user_text,
    prompt_tokens,
    say,
    strip_status,
    tool_call,
)

INSTRUCTIONS = "This is a community of beekeepers. Never give medical advice about stings."


def msg(text: str) -> InboundEvent:
    return InboundEvent(EventKind.USER_MESSAGE, text)


def system_of(body: dict) -> str:
    return body["messages"][0]["content"]


async def test_every_members_next_turn_reads_the_name_and_instructions(engine, fake, clock):
    members = Members(engine.sessions, engine.mind.config, clock)
    ana, ben = await engine.agent("guild", "ana"), await engine.agent("guild", "ben")
    await engine.converse(ana, msg("remember that I keep three hives"))
    before = system_of(fake.chat_requests[-1])
    assert "beekeepers" not in before

    await members.profiles.change(
        "guild", "admin1", name="Hive", instructions=INSTRUCTIONS, persona=None
    )
    await engine.converse(ana, msg("hello again"))
    await engine.converse(ben, msg("hi"))
    for body in fake.chat_requests[-2:]:
        system = system_of(body)
        assert "Your name in this community is Hive." in system
        assert INSTRUCTIONS in system
        # After the fixed instructions, before the member's own blocks: the stable prefix.
        assert system.index(INSTRUCTIONS) < system.index("Working context:")
    ana_system, ben_system = (system_of(b) for b in fake.chat_requests[-2:])
    assert "three hives" in ana_system and "three hives" not in ben_system


async def test_the_prefix_holds_between_turns_with_instructions(engine, fake, clock):
    members = Members(engine.sessions, engine.mind.config, clock)
    await members.profiles.change("guild", "admin1", instructions=INSTRUCTIONS)
    scope = await engine.agent("guild", "ana")
    await engine.converse(scope, msg("first"))
    await engine.converse(scope, msg("second"))
    first, second = fake.chat_requests[-2:]
    assert system_of(first) == system_of(second)
    assert strip_status(second["messages"][1]["content"]) == "first"
    # The second prompt repeats the first up to the status: what a prompt cache serves.
    shared = common_prefix(prompt_tokens(first), prompt_tokens(second))
    assert shared >= len(prompt_tokens({**first, "messages": first["messages"][:1]})) + 2


async def test_new_members_start_from_the_community_persona(engine, clock):
    members = Members(engine.sessions, engine.mind.config, clock)
    await engine.agent("guild", "old")
    persona = "I am Hive, the apiary's helper. I speak plainly and love bees."
    await members.profiles.change("guild", "admin1", persona=persona)
    await engine.agent("guild", "new")
    new, old = await members.view("guild", "new"), await members.view("guild", "old")
    assert new is not None and old is not None
    assert dict((label, value) for label, value, _ in new.blocks)["persona"] == persona
    # An existing member keeps theirs unless the admin chose to replace it.
    assert dict((label, value) for label, value, _ in old.blocks)["persona"] == DEFAULT_PERSONA
    # Another community is untouched.
    await engine.agent("other", "x")
    other = await members.view("other", "x")
    assert other is not None
    assert dict((label, value) for label, value, _ in other.blocks)["persona"] == DEFAULT_PERSONA


async def test_replacing_existing_personas_is_a_choice_and_audited(engine, clock):
    members = Members(engine.sessions, engine.mind.config, clock)
    await engine.agent("guild", "a")
    await engine.agent("guild", "b")
    await engine.agent("other", "c")
    persona = "I am Hive."
    _, replaced = await members.profiles.change(
        "guild", "admin1", persona=persona, replace_personas=True
    )
    assert replaced == 2
    for user in ("a", "b"):
        view = await members.view("guild", user)
        assert view is not None and ("persona", persona) in [(b[0], b[1]) for b in view.blocks]
    other = await members.view("other", "c")
    assert other is not None and ("persona", DEFAULT_PERSONA) in [
        (b[0], b[1]) for b in other.blocks
    ]
    entry = (await members.audit_log("guild"))[0]
    assert (entry.actor, entry.action) == ("admin1", "companion")
    assert entry.detail == {"persona": persona, "replace_personas": True}


async def test_over_the_limit_is_refused_whole(engine, clock):
    members = Members(engine.sessions, engine.mind.config, clock)
    await members.profiles.change("guild", "admin1", name="Hive")
    with pytest.raises(BadSetting, match="4001 characters, over its limit of 4000"):
        await members.profiles.change("guild", "admin1", name="Bee", instructions="x" * 4001)
    with pytest.raises(BadSetting, match="name would have 41 characters"):
        await members.profiles.change("guild", "admin1", name="n" * 41)
    with pytest.raises(BadSetting, match="persona would have 2001"):
        await members.profiles.change("guild", "admin1", persona="p" * 2001)
    profile, _ = await members.profiles.get("guild")
    assert profile.name == "Hive" and profile.instructions == ""
    assert [e.action for e in await members.audit_log("guild")] == ["companion"]


async def test_the_models_functions_cannot_change_the_instructions(engine, fake, clock):
    members = Members(engine.sessions, engine.mind.config, clock)
    await members.profiles.change("guild", "admin1", instructions=INSTRUCTIONS)

    def vandal(body):
        if body["messages"][-1]["role"] == "tool":
            return say("done")
        return calls(
            tool_call(
                "core_memory_replace",
                label="community",
                old_content="beekeepers",
                new_content="anything goes",
            )
        )

    fake.brain = vandal
    scope = await engine.agent("guild", "ana")
    await engine.converse(scope, msg("change your rules"))
    result = fake.chat_requests[-1]["messages"]
    assert any("community" in str(m.get("content")) and m["role"] == "tool" for m in result)
    profile, _ = await members.profiles.get("guild")
    assert profile.instructions == INSTRUCTIONS
    fake.brain = lambda body: say(last_user_text(body))
    await engine.converse(scope, msg("again"))
    assert INSTRUCTIONS in system_of(fake.chat_requests[-1])


async def test_instructions_are_bounded_in_a_small_window(make_engine_for, fake, clock):
    engine = make_engine_for(EngineConfig(context_window=4096, rate_limit=None))
    members = Members(engine.sessions, engine.mind.config, clock)
    await members.profiles.change(
        "guild", "admin1", instructions="bees " * 790
    )  # 3,950 characters, stored as 3,949
    scope = await engine.agent("guild", "ana")
    await engine.converse(scope, msg("hi"))
    system = system_of(fake.chat_requests[-1])
    assert "[... cut here: 3949 characters in all; the rest is not shown]\n</community>" in system
    assert system.count("bees") < 790 // 2


@pytest.mark.parametrize("bad", ["\x00", "\ud800"])
async def test_a_nul_or_lone_surrogate_from_an_admin_is_stored_replaced(engine, fake, clock, bad):
    """Slash commands carry what the admin typed: Postgres's JSON takes neither character."""
    members = Members(engine.sessions, engine.mind.config, clock)
    await members.profiles.change(
        "guild", "admin1", name=f"Hi{bad}ve", persona=f"I am{bad} Hive.", instructions=f"Be{bad}es"
    )
    profile, _ = await members.profiles.get("guild")
    assert profile.stored == {
        "name": "Hi\ufffdve",
        "persona": "I am\ufffd Hive.",
        "instructions": "Be\ufffdes",
    }
    said = await set_welcome_text(members, "guild", "admin1", f"Read{bad} #rules")
    assert said.startswith("Saved")
    assert (await members.tenant_settings("guild"))["welcome_text"] == "Read\ufffd #rules"
