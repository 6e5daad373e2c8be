"""Key-word ranking reads each agent's word index (`message_terms`: how many messages hold
each word; `message_words`: which ones), kept as messages come and go instead of counted on
every search: through turns, imports, resets, eval's return to an imported past and a
community's erasure both stay what the agent's messages give, the ranking is exactly the
one computed from the messages themselves, and it follows what the member said last."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from core.config import EngineConfig
from core.directory import ensure_agent, find_agent
from core.events import EventKind, InboundEvent
from core.members.browse import remove_passage
from core.members.portability import parse_export
from core.memory import keywords
from core.memory.search import archival_search, recall_search
from core.memory.store import AgentStore
from core.tenants.tenancy import Tenancy

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)

COUNTED = """
SELECT tenant_id, agent_id, lexeme, count(*) FROM messages,
       unnest(array_append(tsvector_to_array(tsv), '')) AS lexeme
WHERE search_text IS NOT NULL GROUP BY 1, 2, 3
"""


LISTED = """
SELECT tenant_id, agent_id, lexeme, id, length(tsv) FROM messages,
       unnest(tsvector_to_array(tsv)) AS lexeme
WHERE search_text IS NOT NULL
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
    await assert_listed(sessions, "message_words", "message_id", LISTED)


async def assert_listed(sessions, table: str, row_id: str, listed_sql: str) -> None:
    """`table` holds each word of each row once, as `listed_sql` gives them, none left behind."""
    async with sessions() as session:
        kept = await session.execute(
            text(f"SELECT tenant_id, agent_id, lexeme, {row_id}, words FROM {table}")
        )
        listed = await session.execute(text(listed_sql))
        kept_rows, listed_rows = sorted(tuple(r) for r in kept), sorted(tuple(r) for r in listed)
    assert kept_rows == listed_rows


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
    # "lemon" is now in eight messages of nine: holding only it scores under half of what
    # the rare "tea" gives, so those are no results (core.memory.ranking.WORD_RATIO)
    assert after.total == 1


async def test_the_ranking_is_the_one_computed_from_the_messages_themselves(sessions):
    """Over a random corpus: the order, the scores and the total are those of summing the
    weights of the query's words each message holds (weights from counting the messages),
    over 1 + 0.1 ln(1 + its distinct words), best first and newest first on a tie."""
    rng = random.Random(5)
    filler = ["river", "stone", "cloud", "lamp", "chair", "paper", "green", "window"]
    lines = []
    for _ in range(400):
        words = [
            w
            for w, share in (("alpha", 0.3), ("beta", 0.3), ("gamma", 0.05))
            if rng.random() < share
        ]
        lines.append(" ".join(words + rng.sample(filler, rng.randint(0, 6))) or "lamp")
    scope = await said(sessions, "g", "ann", lines)
    async with sessions() as session:
        held = (
            await session.execute(
                text(
                    "SELECT id, tsvector_to_array(tsv) AS lexemes FROM messages "
                    "WHERE agent_id = :agent AND search_text IS NOT NULL"
                ),
                {"agent": scope.agent_id},
            )
        ).all()
        corpus = len(held)
        for query in ("alpha beta", "alpha beta gamma", "gamma lamp", "window"):
            words = await keywords.weights(session, scope, query)
            df = {w: sum(w in row.lexemes for row in held) for w in query.split()}
            idf = {w: math.log(1 + (corpus - n + 0.5) / (n + 0.5)) for w, n in df.items()}
            expected = sorted(
                (
                    (sum(idf[w] for w in df if w in row.lexemes), row.id, len(row.lexemes))
                    for row in held
                    if any(w in row.lexemes for w in df)
                ),
                key=lambda s: (-s[0] / (1 + 0.1 * math.log(1 + s[2])), -s[1]),
            )
            got = await keywords.best(session, scope, words, 25)
            assert got == [row_id for _, row_id, _ in expected[:25]]
            page = await keywords.ranked(session, scope, words, 10, 20)
            assert [r.id for r in page] == [row_id for _, row_id, _ in expected[20:30]]
            assert {r.total for r in page} == {len(expected)}


PASSAGE_WORDS = """
SELECT tenant_id, agent_id, lexeme, id, length(tsv) FROM passages,
       unnest(tsvector_to_array(tsv)) AS lexeme
"""


PASSAGES_COUNTED = """
SELECT tenant_id, agent_id, lexeme, count(*) FROM passages,
       unnest(array_append(tsvector_to_array(tsv), '')) AS lexeme
GROUP BY 1, 2, 3
"""


async def assert_passage_words_true(sessions) -> None:
    await assert_listed(sessions, "passage_words", "passage_id", PASSAGE_WORDS)
    async with sessions() as session:  # a word no passage holds any more may stay at 0
        kept = await session.execute(
            text("SELECT tenant_id, agent_id, lexeme, passages FROM passage_terms")
        )
        counted = await session.execute(text(PASSAGES_COUNTED))
        kept_rows = {tuple(r) for r in kept if r.passages}
        assert kept_rows == {tuple(r) for r in counted}


async def test_passage_words_stay_those_of_the_passages(members, sessions):
    """Archival search finds passages by their listed and counted words: each stored
    passage's are listed and counted, and they go with it however it goes (removed, reset,
    replaced, erased)."""
    async with sessions() as session, session.begin():
        scope = await ensure_agent(session, "g", "ann", EngineConfig())
        store = AgentStore(session, scope, EngineConfig().max_message_tokens)
        kept = [await store.add_passage(t, T0) for t in ("lemon cake recipe", "tea at five")]
    await assert_passage_words_true(sessions)
    async with sessions() as session:
        found = await archival_search(session, scope, "lemon recipes", None)
    assert [h.text for h in found.hits] == ["lemon cake recipe"]
    async with sessions() as session, session.begin():
        assert await remove_passage(session, scope, kept[0].id)
    async with sessions() as session, session.begin():
        assert not await remove_passage(session, scope, kept[0].id)  # gone already
    await assert_passage_words_true(sessions)
    async with sessions() as session:
        assert (await archival_search(session, scope, "lemon", None)).total == 0
    saved = parse_export(await members.export("g", "ann"))
    await members.admin_import("g", "admin", "ann", saved, replace=True)
    await assert_passage_words_true(sessions)
    async with sessions() as session:
        assert (await archival_search(session, scope, "tea", None)).total == 1
    assert await members.admin_reset("g", "admin", "ann")
    await assert_passage_words_true(sessions)
