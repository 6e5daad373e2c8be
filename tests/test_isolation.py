"""Members never see each other's memory: within one tenant, and across tenants."""

from sqlalchemy import select

from core.events import EventKind, InboundEvent
from core.memory.search import archival_search, recall_search
from core.models import Block, Message
from tests.fake_openai import (
    calls,
    is_summary_request,
    last,
    last_user_text,
    say,
    summary_of,
    tool_call,
)


def brain(body):
    if is_summary_request(body):
        return summary_of(body)
    newest = last(body)
    if newest["role"] == "tool":
        return say(newest["content"])
    text = last_user_text(body)
    if text.startswith("note "):
        return calls(
            tool_call("core_memory_append", label="human", content=text[5:]),
            tool_call("archival_memory_insert", content=text[5:]),
        )
    if text.startswith("find "):
        return calls(tool_call("conversation_search", query=text[5:]))
    if text.startswith("dig "):
        return calls(tool_call("archival_memory_search", query=text[4:]))
    return say("ok")


def msg(text):
    return InboundEvent(EventKind.USER_MESSAGE, text)


async def test_two_members_and_two_tenants_stay_apart(engine, fake, sessions):
    fake.brain = brain
    members = {
        ("guild-1", "ann"): "ann's secret is the violet umbrella",
        ("guild-1", "bob"): "bob's secret is the orange kayak",
        ("guild-2", "ann"): "other ann's secret is the silver trumpet",
    }
    scopes = {}
    for (tenant, user), secret in members.items():
        scopes[tenant, user] = scope = await engine.agent(tenant, user)
        await engine.converse(scope, msg("note " + secret))
    for (tenant, user), secret in members.items():
        scope = scopes[tenant, user]
        start = len(fake.requests)
        found = (await engine.converse(scope, msg("find what is the secret"))).replies
        dug = (await engine.converse(scope, msg("dig the secret"))).replies
        own_word = secret.split()[-1]
        others = [s.split()[-1] for k, s in members.items() if k != (tenant, user)]
        assert own_word in found[0] and own_word in dug[0]
        seen = " ".join(str(b) for b in fake.requests[start:])
        for word in others:
            assert word not in seen, f"{user}@{tenant} saw {word}"
    async with sessions() as session:
        for (tenant, user), scope in scopes.items():
            human = await session.scalar(
                select(Block.value).where(Block.agent_id == scope.agent_id, Block.label == "human")
            )
            assert members[tenant, user] in human
            page = await recall_search(session, scope, "secret", page_size=50)
            own_ids = await _ids_of(session, scope.agent_id)
            assert page.hits and all(h.id in own_ids for h in page.hits)
            passages = await archival_search(session, scope, "secret", None, page_size=50)
            assert [h.text for h in passages.hits] == [members[tenant, user]]


async def _ids_of(session, agent_id):
    return set(await session.scalars(select(Message.id).where(Message.agent_id == agent_id)))


async def test_same_user_id_in_two_tenants_is_two_agents(engine):
    a = await engine.agent("discord:1", "42")
    b = await engine.agent("discord:2", "42")
    again = await engine.agent("discord:1", "42")
    assert a != b and a == again
