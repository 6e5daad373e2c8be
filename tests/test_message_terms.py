"""Key-word ranking weighs words by each agent's term statistics (`message_terms`), kept as
messages come and go instead of counted on every search: through turns, imports, resets,
eval's return to an imported past and a community's erasure they stay what counting the
agent's messages gives, and the ranking follows what the member said last."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from core.config import EngineConfig
from core.directory import ensure_agent, find_agent
from core.events import EventKind, InboundEvent
from core.members.portability import parse_export
from core.members.tenancy import Tenancy
from core.memory import keywords
from core.memory.ranking import shortlist
from core.memory.search import recall_search
from core.memory.store import AgentStore

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)

COUNTED = """
SELECT tenant_id, agent_id, lexeme, count(*) FROM messages,
       unnest(array_append(tsvector_to_array(tsv), '')) AS lexeme
WHERE search_text IS NOT NULL GROUP BY 1, 2, 3
"""


async def kept_and_counted(sessions) -> tuple[set, set]:
    async with sessions() as session:
        kept = (
            await session.execute(
                text("SELECT tenant_id, agent_id, lexeme, messages FROM message_terms")
            )
        ).all()
        counted = (await session.execute(text(COUNTED))).all()
    return {tuple(r) for r in kept}, {tuple(r) for r in counted}


async def assert_counts_true(sessions) -> None:
    kept, counted = await kept_and_counted(sessions)
    assert kept == counted


async def said(sessions, tenant: str, user: str, lines: list[str]):
    async with sessions() as session, session.begin():
        scope = await ensure_agent(session, tenant, user, EngineConfig())
        store = AgentStore(session, scope, EngineConfig().max_message_tokens)
        for i, words in enumerate(lines):
            await store.append(
                T0 + timedelta(minutes=i), role="user", content=words, search_text=words
            )
            await store.append(T0, role="tool", content='{"ok": true}')  # not searchable
    return scope


async def test_the_counts_stay_those_of_the_messages_through_every_change(
    engine, members, sessions, clock
):
    ann = await engine.agent("g", "ann")
    for words in ("I like green tea", "tea with lemon, please", "my cat likes the garden"):
        await engine.converse(ann, InboundEvent(EventKind.USER_MESSAGE, words))
    await said(sessions, "g", "bob", ["bob plays chess", "chess and tea"])
    await said(sessions, "h", "cy", ["cy sails boats"])
    await assert_counts_true(sessions)
    kept, _ = await kept_and_counted(sessions)
    assert (ann.tenant_id, ann.agent_id, "tea", 4) in kept  # two said, two echoed back

    saved = parse_export(await members.export("g", "ann"))
    assert await members.admin_reset("g", "admin", "ann")
    await assert_counts_true(sessions)
    await members.admin_import("g", "admin", "ann", saved)
    await members.admin_import("g", "admin", "ann", saved, replace=True)
    await assert_counts_true(sessions)

    async with sessions() as session, session.begin():
        scope = await find_agent(session, "g", "ann")
        assert scope is not None
        store = AgentStore(session, scope, EngineConfig().max_message_tokens)
        await store.lock_agent()
        await store.forget_exchanges()  # eval's way back to an imported past
    await assert_counts_true(sessions)

    assert await members.forget("g", "bob")
    assert await Tenancy(sessions, clock).erase("h", "operator test") is not None
    await assert_counts_true(sessions)
    kept, _ = await kept_and_counted(sessions)
    assert {agent for _, agent, _, _ in kept} == {scope.agent_id}


async def test_the_ranking_follows_what_the_member_says_now(members, sessions):
    """A word common in the old memory and rare in the new one ranks first once the memory
    is replaced: its weight is the new messages' (with the old counts kept, both words
    would weigh the same and the newest message, a "lemon cake", would come first)."""
    old = ["tea time"] * 8 + ["lemon tart"]
    scope = await said(sessions, "g", "ann", old)
    async with sessions() as session:
        before = await recall_search(session, scope, "tea lemon", page_size=1)
    assert before.hits[0].text == "lemon tart"

    saved = parse_export(await members.export("g", "ann"))
    new = [
        {"role": "user", "content": w, "search_text": w, "created_at": T0.isoformat()}
        for w in ["tea time"] + ["lemon cake"] * 8
    ]
    replaced = saved.model_copy(update={"messages": [type(saved.messages[0])(**m) for m in new]})
    await members.admin_import("g", "admin", "ann", replaced, replace=True)
    async with sessions() as session:
        after = await recall_search(session, scope, "tea lemon", page_size=1)
    assert after.hits[0].text == "tea time"
    assert after.total == 9


async def test_scoring_a_shortlist_first_gives_exactly_the_full_ranking(sessions):
    """The fused search takes its best messages by key words from the messages holding the
    likeliest word combinations when that settles it; the list is the full ranking's."""
    rng = random.Random(5)
    filler = ["river", "stone", "cloud", "lamp", "chair", "paper", "green", "window"]
    lines = []
    for _ in range(600):
        words = [
            w
            for w, share in (("alpha", 0.3), ("beta", 0.3), ("gamma", 0.05))
            if rng.random() < share
        ]
        lines.append(" ".join(words + rng.sample(filler, rng.randint(0, 6))) or "lamp")
    scope = await said(sessions, "g", "ann", lines)
    async with sessions() as session:
        for query, wanted in (("alpha beta", 25), ("alpha beta gamma", 25), ("alpha beta", 100)):
            words = await keywords.weights(session, scope, query)
            plan = shortlist([(float(w.idf), w.held) for w in words], words[0].corpus, wanted)
            full = await keywords.ranked(session, scope, words, wanted)
            assert await keywords.best(session, scope, words, wanted) == [r.id for r in full]
            if wanted == 25:
                assert plan is not None  # the shortlist was tried (and, here, settled it)
