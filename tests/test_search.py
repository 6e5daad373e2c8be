"""Recall search finds what a question is about; date search respects the member's day;
archival search works by meaning (with embeddings) or by key words (without)."""

from datetime import UTC, date, datetime, timedelta

from core.config import EngineConfig
from core.directory import ensure_agent
from core.memory import keywords
from core.memory.search import archival_search, recall_by_date, recall_search
from core.memory.store import AgentStore
from core.memory.tools import MAX_QUERY_CHARS
from tests.fake_openai import embed_text

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


async def _agent_with(sessions, lines, user="u"):
    async with sessions() as session, session.begin():
        scope = await ensure_agent(session, "t", user, EngineConfig())
        store = AgentStore(session, scope, EngineConfig().max_message_tokens)
        for i, (role, text) in enumerate(lines):
            await store.append(T0 + timedelta(hours=i), role=role, content=text, search_text=text)
    return scope


CHAT = [
    ("user", "I adopted a rescue greyhound named Pixel last spring"),
    ("assistant", "That's lovely! How is Pixel settling in?"),
    ("user", "We went to the farmers market and bought peaches"),
    ("user", "My sister Dana is getting married in October"),
    ("user", "The weather was nice today"),
    ("user", "I started learning the cello, my teacher is strict"),
    ("user", "Today was nice, nice, nice"),
]


async def test_a_question_finds_messages_sharing_its_key_words(sessions):
    scope = await _agent_with(sessions, CHAT)
    async with sessions() as session:
        dog = await recall_search(session, scope, "What was the name of my dog, the greyhound?")
        wedding = await recall_search(session, scope, "when is my sister's wedding? married?")
        cello = await recall_search(session, scope, "how are the cello lessons going")
        nothing = await recall_search(session, scope, "quantum chromodynamics")
    assert dog.hits[0].text.startswith("I adopted a rescue greyhound")
    assert wedding.hits[0].text.startswith("My sister Dana")
    assert cello.hits[0].text.startswith("I started learning the cello")
    assert nothing.total == 0 and nothing.hits == []


async def test_stemming_and_rare_words_rank_first(sessions):
    scope = await _agent_with(sessions, CHAT)
    async with sessions() as session:
        page = await recall_search(session, scope, "nice weather")
    # "weather" is rarer than "nice": the message with both, then the one with the rare word.
    assert page.hits[0].text == "The weather was nice today"
    async with sessions() as session:
        stem = await recall_search(session, scope, "marriage plans of my sisters")
    assert stem.hits and stem.hits[0].text.startswith("My sister Dana")


async def test_paging_reports_page_counts(sessions):
    scope = await _agent_with(sessions, [("user", f"kiwi fact number {i}") for i in range(12)])
    async with sessions() as session:
        pages = [await recall_search(session, scope, "kiwi", page=p) for p in (1, 2, 3, 4)]
    assert [p.pages for p in pages] == [3, 3, 3, 3]
    assert [len(p.hits) for p in pages] == [5, 5, 2, 0]
    assert len({h.id for p in pages for h in p.hits}) == 12


async def test_search_by_date_uses_the_members_day(sessions):
    lines = [("user", f"hour {i}") for i in range(30)]  # T0 is 12:00 UTC on May 1
    scope = await _agent_with(sessions, lines)
    async with sessions() as session:
        utc_may2 = await recall_by_date(
            session, scope, date(2026, 5, 2), date(2026, 5, 2), page_size=50
        )
        tokyo_may2 = await recall_by_date(
            session, scope, date(2026, 5, 2), date(2026, 5, 2), timezone="Asia/Tokyo", page_size=50
        )
    assert [h.text for h in utc_may2.hits] == [f"hour {i}" for i in range(12, 30)]
    # In Tokyo (UTC+9) May 2 starts at 15:00 UTC on May 1.
    assert [h.text for h in tokyo_may2.hits] == [f"hour {i}" for i in range(3, 27)]


async def test_archival_search_by_meaning_and_by_words(sessions):
    texts = [
        "Recipe: grandma's apple pie uses cinnamon and butter",
        "Trip log: hiking the Dolomites in July",
        "Work: quarterly report due Friday",
    ]
    async with sessions() as session, session.begin():
        scope = await ensure_agent(session, "t", "u", EngineConfig())
        store = AgentStore(session, scope, EngineConfig().max_message_tokens)
        for i, text in enumerate(texts):
            await store.add_passage(text, T0 + timedelta(minutes=i), "agent", embed_text(text, 16))
    async with sessions() as session, session.begin():
        by_vector = await archival_search(
            session, scope, "apple pie", embed_text("apple pie cinnamon", 16)
        )
        by_words = await archival_search(session, scope, "hiking trip", None)
    # the other two are the nearest vectors too, but far: no results
    assert by_vector.hits[0].text == texts[0] and by_vector.total == 1
    assert by_words.hits[0].text == texts[1] and by_words.total == 1


async def test_vector_search_stays_within_the_agent_among_many(sessions):
    """With the HNSW index and many other agents' rows, one agent's page is still full."""
    async with sessions() as session, session.begin():
        mine = await ensure_agent(session, "t", "me", EngineConfig())
        other = await ensure_agent(session, "t", "other", EngineConfig())
        for i in range(400):
            await AgentStore(session, other, 2048).add_passage(
                f"other note {i}", T0, None, embed_text(f"cooking note {i}", 16)
            )
        for i in range(6):
            await AgentStore(session, mine, 2048).add_passage(
                f"my note {i}", T0, None, embed_text(f"garden note {i}", 16)
            )
    async with sessions() as session, session.begin():
        page = await archival_search(session, mine, "cooking", embed_text("cooking note", 16))
    assert len(page.hits) == 5 and all(h.text.startswith("my note") for h in page.hits)
    assert page.pages == 2


async def test_a_long_query_is_weighed_by_its_rarest_words_only(sessions):
    """A query of 1,000 characters of the member's common words (the model may be asked to
    send one) reads only the rows of its QUERY_LEXEMES rarest words, and its rare word still
    finds its message, among messages and passages alike."""
    # Forty words, each the whole of 2 to 5 messages (the later ones commoner), and one
    # message of a word said once.
    common = [f"kw{i:02d}" for i in range(40)]
    texts = [word for i, word in enumerate(common) for _ in range(2 + i // 10)] + ["zeppelin"]
    async with sessions() as session, session.begin():
        scope = await ensure_agent(session, "t", "u", EngineConfig())
        store = AgentStore(session, scope, EngineConfig().max_message_tokens)
        for i, text in enumerate(texts):
            when = T0 + timedelta(minutes=i)
            await store.append(when, role="user", content=text, search_text=text)
            await store.add_passage(text, when, "agent", None)
    words = " ".join(common + ["zeppelin"])
    query = " ".join([words] * (MAX_QUERY_CHARS // (len(words) + 1)))
    assert len(query) <= MAX_QUERY_CHARS and len(set(query.split())) == 41
    rarest = {"zeppelin", *common[: keywords.QUERY_LEXEMES - 1]}  # by count, then by name
    async with sessions() as session:
        for index in (keywords.MESSAGES, keywords.PASSAGES):
            weighed = await keywords.weights(session, scope, query, index)
            assert {w.lexeme for w in weighed} == rarest
        found = await recall_search(session, scope, query)
        passages = await archival_search(session, scope, query, None)
    assert found.hits[0].text == "zeppelin" and passages.hits[0].text == "zeppelin"
