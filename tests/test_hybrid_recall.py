"""Recall by key words and meaning: messages get vectors after the turn commits, searches
fuse full text and vectors, names stay out of the query, pages and dates are kept.

The embedder here is the fake endpoint's bag of words (16 numbers): what is tested is the
mechanics. tests/test_local_embedder.py runs the real local model end to end.
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from core.config import EngineConfig
from core.directory import ensure_agent
from core.errors import EmbeddingError
from core.events import EventKind, InboundEvent
from core.memory.embeddings import EmbeddingWorker, embed_missing
from core.memory.search import archival_search, recall_search
from core.memory.store import AgentStore
from core.memory.tools import ToolContext, _format_page, conversation_search, find_messages
from tests.fake_openai import calls, embed_text, say, tool_call
from tests.test_functions import script, shown_results

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


class BagOfWords:
    """The fake endpoint's embedding, in process; records what it was asked to embed."""

    def __init__(self, dim: int = 16) -> None:
        self.dim = dim
        self.asked: list[str] = []

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.asked += texts
        return [embed_text(t, self.dim) for t in texts]


class Gated(BagOfWords):
    """Waits for `gate` before answering: a slow embedding model."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        await self.gate.wait()
        return await super().embed(texts)


class Broken(BagOfWords):
    async def embed(self, texts: list[str]) -> list[list[float]]:
        raise EmbeddingError("the embedding endpoint went away")


async def vectors(sessions) -> tuple[int, int]:
    """(messages with search text, how many of them have a vector)."""
    async with sessions() as session:
        row = (
            await session.execute(
                text(
                    "SELECT count(*) AS n, count(v.embedding) AS v FROM messages m "
                    "LEFT JOIN message_vectors v ON v.tenant_id = m.tenant_id "
                    "AND v.message_id = m.id WHERE m.search_text IS NOT NULL"
                )
            )
        ).one()
    return row.n, row.v


def talk(engine, scope, words: str):
    return engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, words))


async def test_the_reply_never_waits_for_embeddings_and_they_follow_the_commit(
    make_engine_for, sessions, fake
):
    engine = make_engine_for()
    slow = Gated()
    engine.embeddings = EmbeddingWorker(sessions, slow)
    scope = await engine.agent("t", "ana")
    async with engine.embeddings:
        exchange = await asyncio.wait_for(talk(engine, scope, "my puppy is called Rex"), 10)
        assert exchange.replies == ["You said: my puppy is called Rex"]
        assert await vectors(sessions) == (2, 0)  # stored and answered, no vector yet
        slow.gate.set()
        await asyncio.wait_for(engine.embeddings.settled(), 10)
        assert await vectors(sessions) == (2, 2)
        assert "my puppy is called Rex" in slow.asked


async def test_a_failed_pass_loses_nothing_and_the_catch_up_fills_the_gaps(
    make_engine_for, sessions
):
    engine = make_engine_for()
    engine.embeddings = EmbeddingWorker(sessions, Broken())
    scope = await engine.agent("t", "ana")
    async with engine.embeddings:
        for words in ("I like tea", "and long walks"):
            assert (await talk(engine, scope, words)).replies
        await asyncio.wait_for(engine.embeddings.settled(), 10)
    assert await vectors(sessions) == (4, 0)
    # After a restart, the worker's first pass embeds what is missing.
    async with EmbeddingWorker(sessions, BagOfWords()) as worker:
        await asyncio.wait_for(worker.settled(), 10)
    assert await vectors(sessions) == (4, 4)


async def _agent_with(sessions, lines, name=None):
    async with sessions() as session, session.begin():
        scope = await ensure_agent(session, "t", "u", EngineConfig(), name)
        store = AgentStore(session, scope, EngineConfig().max_message_tokens)
        for i, (role, words) in enumerate(lines):
            await store.append(T0 + timedelta(hours=i), role=role, content=words, search_text=words)
    await embed_missing(sessions, BagOfWords())
    return scope


async def test_the_turn_after_a_matching_question_is_found_though_it_shares_no_word(sessions):
    """Among the best ten a search tells (`RESULTS_CAP`): with 120 rows sharing "name" the
    answer ranked past them, on a page the model would not have read, and is no longer told."""
    filler = [("user", f"note {i}: the name of street {i} is on the map") for i in range(6)]
    lines = filler + [
        ("user", "we got a puppy! what name should the puppy get?"),
        ("assistant", "Rex, after your grandfather"),
    ]
    scope = await _agent_with(sessions, lines)
    query = "puppy name"
    async with sessions() as session:
        hybrid = await recall_search(session, scope, query, 1, 50, None, embed_text(query, 16))
        words = await recall_search(session, scope, query, 1, 200)
    texts = [hit.text for hit in hybrid.hits]
    assert texts[0] == "we got a puppy! what name should the puppy get?"
    assert "Rex, after your grandfather" in texts
    assert "Rex, after your grandfather" not in [hit.text for hit in words.hits]


async def test_conversation_search_leaves_names_out_and_shows_pages_and_dates(
    make_engine_for, sessions, fake
):
    engine = make_engine_for(embeddings=True)
    scope = await engine.agent("t", "u1", "Ana")
    for n in range(6):
        await talk(engine, scope, f"I planted tulips in bed {n}")
    await embed_missing(sessions, engine.mind.embedder)
    fake.embedding_requests.clear()
    fake.requests.clear()
    fake.brain = script(
        calls(tool_call("conversation_search", query="Ana's tulips")),
        calls(tool_call("conversation_search", query="Companion tulips", page=2)),
        say("Six beds of tulips."),
    )
    await talk(engine, scope, "what did I plant?")

    asked = [r["input"] for r in fake.embedding_requests]
    # the member's and the agent's names left out; a possessive is English, so its meaning
    # is what the member would have said
    assert asked == [["my tulips"], ["tulips"]]
    first, second = (shown_results(r)[0] for r in fake.chat_requests[1:3])
    assert re.match(r"Showing messages: page 1 of \d+ \((the best 10 of )?\d+ results\)\.", first)
    assert second.startswith("Showing messages: page 2 of ")
    hits = [line for line in first.splitlines() if line.startswith("- [")]
    assert len(hits) == 5
    assert all(re.match(r"- \[\d{4}-\d\d-\d\d \d\d:\d\d (user|assistant)\] ", h) for h in hits)
    assert "what did I plant" not in first + second  # the question itself is not a result


async def test_a_search_naming_the_member_finds_their_words_before_the_agents(
    make_engine_for, sessions, fake
):
    """Both sides talked about a dog; the model asks for Ana's: her own message comes
    first, and the agent's is still in the list."""
    engine = make_engine_for(embeddings=True)
    scope = await engine.agent("t", "u1", "Ana")
    fake.brain = lambda body: say("My dog is called Bolt and he loves the park.")
    await talk(engine, scope, "my dog is called Rex and he loves the park")
    for n in range(8):
        fake.brain = lambda body, n=n: say(f"the park had dogs on day {n}")
        await talk(engine, scope, f"more dogs in the park on day {n}")
    await embed_missing(sessions, engine.mind.embedder)
    fake.requests.clear()
    fake.brain = script(
        calls(tool_call("conversation_search", query="Ana's dog called park")),
        calls(tool_call("conversation_search", query="Companion's dog called park")),
        say("Rex."),
    )
    await talk(engine, scope, "what is my dog called?")
    for_ana, for_agent = (shown_results(r)[0] for r in fake.chat_requests[1:3])
    first = [line for line in for_ana.splitlines() if line.startswith("- [")][0]
    assert "user] my dog is called Rex" in first
    first = [line for line in for_agent.splitlines() if line.startswith("- [")][0]
    assert "assistant] My dog is called Bolt" in first
    # the other side's words are ranked lower, not left out: both find the same results
    counts = [
        re.match(r"Showing messages: page 1 of \d+ \((?:the best \d+ of )?(\d+) results\)", found)
        for found in (for_ana, for_agent)
    ]
    assert all(counts) and counts[0].group(1) == counts[1].group(1)  # type: ignore[union-attr]


async def test_archival_search_fuses_words_and_meaning(sessions):
    async with sessions() as session, session.begin():
        scope = await ensure_agent(session, "t", "u", EngineConfig())
        store = AgentStore(session, scope, EngineConfig().max_message_tokens)
        for i in range(30):
            note = f"recipe {i}: soup with leeks" if i % 3 else f"chess opening {i}"
            await store.add_passage(note, T0, "agent", None)
    await embed_missing(sessions, BagOfWords())  # the catch-up embeds passages too
    async with sessions() as session:
        query = "chess opening"
        page = await archival_search(session, scope, query, embed_text(query, 16), 1, 5)
    assert page.pages >= 2 and page.total >= 10
    assert all("chess" in hit.text for hit in page.hits)


async def test_the_nearest_vectors_leave_the_events_own_messages_out(
    make_engine_for, sessions, fake
):
    """A member's message can be embedded before its turn runs (stored when acknowledged,
    answered later): the turn's search must not find the question by its own vector."""
    engine = make_engine_for(embeddings=True)
    scope = await engine.agent("t", "u1", "Ana")
    for line in ("my tulips are red", "the weather is grey", "what colour are my tulips?"):
        await talk(engine, scope, line)
    await embed_missing(sessions, engine.mind.embedder)
    question = "what colour are my tulips?"
    async with sessions() as session:
        event = await session.scalar(
            text("SELECT event_id FROM messages WHERE search_text = :q"), {"q": question}
        )
        vector = embed_text(question, 16)
        found = await recall_search(session, scope, "hue", 1, 50, None, vector)
        left_out = await recall_search(session, scope, "hue", 1, 50, event, vector)  # meaning
    assert event is not None and question in [hit.text for hit in found.hits]
    assert question not in [hit.text for hit in left_out.hits]
    assert "my tulips are red" in [hit.text for hit in left_out.hits]


async def test_a_message_search_tells_the_best_ten_of_many_matches(sessions):
    """Forty messages all about chess: the model is told two pages of the best ten and how
    many matched, not eight pages to read through (a page past them is empty)."""
    async with sessions() as session, session.begin():
        scope = await ensure_agent(session, "t", "u", EngineConfig())
        store = AgentStore(session, scope, EngineConfig().max_message_tokens)
        for i in range(40):
            words = f"chess game {i} tonight"
            await store.append(
                T0 + timedelta(minutes=i), role="user", content=words, search_text=words
            )
    await embed_missing(sessions, BagOfWords())
    async with sessions() as session:
        query = embed_text("chess", 16)
        first = await recall_search(session, scope, "chess", 1, 5, None, query)
        second = await recall_search(session, scope, "chess", 2, 5, None, query)
        third = await recall_search(session, scope, "chess", 3, 5, None, query)
        words_only = await recall_search(session, scope, "chess", 1, 5)
    assert (first.pages, first.total, first.matched) == (2, 10, 40)
    assert len(second.hits) == 5 and third.hits == []
    assert not {h.id for h in second.hits} & {h.id for h in first.hits}
    assert words_only.total == 40  # key words only (no embedding model): every match counts
    told = _format_page(first, "messages").splitlines()[0]
    assert told == "Showing messages: page 1 of 2 (the best 10 of 40 results)."


async def _cooking_on_many_days(sessions):
    """Twelve days of the same line, one a day at 13:00 UTC from 1 May 2026, and a reply."""
    async with sessions() as session, session.begin():
        scope = await ensure_agent(session, "t", "u", EngineConfig())
        store = AgentStore(session, scope, EngineConfig().max_message_tokens)
        for day in range(12):
            at = T0 + timedelta(days=day, hours=1)
            line = f"I cooked a risotto with mushrooms, attempt {day + 1}"
            await store.append(at, role="user", content=line, search_text=line)
            reply = f"Sounds delicious, note {day + 1}"
            await store.append(at + timedelta(minutes=1), role="assistant", content=reply)
    await embed_missing(sessions, BagOfWords())
    return scope


async def test_a_search_naming_a_day_finds_what_was_said_that_day_first(sessions):
    """The same words on twelve days: a query naming one of them (in any of the forms a
    member or a model writes) gets that day's message first and told as a result; without
    a date the newest comes first."""
    scope = await _cooking_on_many_days(sessions)
    async with sessions() as session:
        ctx = ToolContext(
            AgentStore(session, scope, EngineConfig().max_message_tokens),
            {},
            EngineConfig(),
            T0 + timedelta(days=30),
            embedder=BagOfWords(),
        )
        plain, _ = await find_messages(ctx, "risotto with mushrooms")
        named, _ = await find_messages(ctx, "what risotto did I cook on 5 May 2026?")
        iso, _ = await find_messages(ctx, "risotto 2026-05-09")
        told = await conversation_search(ctx, "risotto on May 7, 2026")
        elsewhen, _ = await find_messages(ctx, "risotto with mushrooms in March 2026")

    def first_days(page):
        return {hit.created_at.day for hit in page.hits[:3]}

    assert 5 not in first_days(plain) and 9 not in first_days(plain)
    # the named day and the days either side (a late evening, another time zone) come first
    assert first_days(named) == {4, 5, 6}
    assert first_days(iso) == {8, 9, 10}
    days = [line[3:13] for line in told.splitlines() if line.startswith("- [")][:3]
    assert sorted(days) == ["2026-05-06", "2026-05-07", "2026-05-08"]
    assert told.startswith("Showing messages: page 1 of 2 (the best 10 of ")
    # a date with no messages changes nothing
    assert [h.id for h in elsewhen.hits] == [h.id for h in plain.hits]


async def test_the_days_a_search_names_are_the_members_days(sessions):
    """At 13:00 UTC on 4 May it was 5 May, 01:00 in Auckland: a member there asking about
    6 May (widened to 5-7 May) gets that message among the day's; a member in UTC does not."""
    scope = await _cooking_on_many_days(sessions)
    async with sessions() as session:
        store = AgentStore(session, scope, EngineConfig().max_message_tokens)
        now = T0 + timedelta(days=30)
        query = "risotto with mushrooms on 6 May 2026"
        utc = ToolContext(store, {}, EngineConfig(), now, embedder=BagOfWords())
        nz = ToolContext(store, {}, EngineConfig(), now, "Pacific/Auckland", BagOfWords())
        in_utc, _ = await find_messages(utc, query)
        in_nz, _ = await find_messages(nz, query)
    assert {hit.created_at.day for hit in in_utc.hits[:3]} == {5, 6, 7}
    assert {hit.created_at.day for hit in in_nz.hits[:3]} == {4, 5, 6}  # in UTC


async def test_a_message_naming_what_the_best_hit_names_comes_up_with_it(sessions):
    """Five lines about kittens; the member's own kitten is Pebble. The later line about
    Pebble is long, so far down by words and by meaning alike (sixth: page 2), but the best
    hit names Pebble, and so does it: it is on the first page, second."""
    pebble = "Pebble knocked the blue vase off the shelf again, that kitten is pure chaos today"
    lines = [
        ("user", "there was a kitten in the shop window on the corner of our street"),
        ("assistant", "so sweet"),
        ("user", "our new kitten Pebble"),
        ("assistant", "lovely name"),
        ("user", "my sister wants a kitten too but her landlord says no pets"),
        ("assistant", "ha"),
        ("user", "the kitten videos my friends send me online are funny"),
        ("assistant", "they are"),
        ("user", "the kitten next door cries all night long at the door"),
        ("assistant", "poor thing"),
        ("user", pebble),
        ("assistant", "oh no"),
    ]
    scope = await _agent_with(sessions, lines)
    query = "kitten"
    async with sessions() as session:
        found = await recall_search(session, scope, query, 1, 5, None, embed_text(query, 16))
    assert [hit.text for hit in found.hits][:2] == ["our new kitten Pebble", pebble]
