"""Memory in every language: the word index reads every script the same way when it stores a
text and when it is asked (migration 0028, `companion_lexemes`).

Japanese and Chinese have no spaces, so a name inside a sentence is found by its character
pairs; German, Spanish and Russian words are found in other inflected forms, without their
accents, in another case; full-width letters, ß and final sigma fold to what a member types.
A fast slice of bench/multilingual_set.py, which measures the same at scale.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import pytest
from alembic import command
from sqlalchemy import text
from sqlalchemy.ext.asyncio import async_sessionmaker

from bot.database import make_engine, migrate, serve_as_app_role
from core.config import EngineConfig
from core.directory import ensure_agent
from core.memory.search import archival_search, recall_search
from core.memory.store import AgentStore
from core.memory.tools import snippet
from tests.fake_openai import calls, say, tool_call
from tests.test_functions import script, shown_results, talk
from tests.test_message_vectors import _alembic

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
MISO = "私の猫の名前はミソで、毎朝五時に起こされます"

# What members of one community told their companions, in their own languages.
SAID = [
    MISO,
    "昨日は友達と一緒に新宿でラーメンを食べました",
    "我的朋友王小明下个月在上海结婚，我是伴郎",
    "我对花生过敏，所以总是看配料表",
    "Meine Schwester ist letztes Jahr nach Hamburg gezogen, um Medizin zu studieren.",
    "Ich arbeite seit sechs Jahren als Krankenpfleger im Nachtdienst.",
    "Mi amigo Tomás se casa en Sevilla en septiembre y yo soy el padrino.",
    "Soy alérgica a las nueces, así que siempre leo las etiquetas.",
    "Мою кошку зовут Муркой, она будит меня в пять утра.",
    "Сестра переехала в Самару в прошлом году.",
    "Das Meeting mit dem Team ist am Freitag, bitte das Deployment vorher checken.",
    "Tomorrow I have a ミーティング with 田中さん about the budget.",
    "Meine Bestellnummer ist ＢＸ－２２９１, sie kam nie an.",
    "Wir wohnen in der Hauptstraße 12.",
    "Ο φίλος μου ο Νίκος είναι σοφός.",
    "I walked the dog in the park and it rained.",
    "В субботу свадьба у моего друга Максима.",
    "Das neue Sofa kommt erst am Montag.",
]


async def member_who_said(sessions, lines=SAID, user="polyglot"):
    async with sessions() as session, session.begin():
        scope = await ensure_agent(session, "t", user, EngineConfig())
        store = AgentStore(session, scope, EngineConfig().max_message_tokens)
        for i, words in enumerate(lines):
            await store.append(
                T0 + timedelta(hours=i), role="user", content=words, search_text=words
            )
    return scope


# query -> the message it must find first, by key words alone
FINDS = {
    "a Japanese name inside a sentence": ("ミソ", MISO),
    "a Japanese phrase": ("猫の名前", MISO),
    "a Japanese place": ("新宿", SAID[1]),
    "a Chinese name inside a sentence": ("王小明", SAID[2]),
    "a Chinese word inside a sentence": ("花生", SAID[3]),
    "a single Chinese character": ("婚", SAID[2]),
    "German, another inflection": ("Schwestern", SAID[4]),
    "German, a compound's case": ("KRANKENPFLEGER", SAID[5]),
    "Spanish, the accent left out": ("Tomas", SAID[6]),
    "Spanish, an accent added": ("alergica nuez", SAID[7]),
    "Russian, another case": ("Мурка", SAID[8]),
    "Russian, the nominative of a place": ("Самара", SAID[9]),
    "English inside German": ("deployment", SAID[10]),
    "katakana inside English": ("ミーティング", SAID[11]),
    "a Japanese name inside English": ("田中", SAID[11]),
    "half-width for full-width": ("bx-2291", SAID[12]),
    "ss for ß": ("HAUPTSTRASSE", SAID[13]),
    "Greek, case and accent": ("ΣΟΦΟΣ", SAID[14]),
    "English still stems": ("walking dogs", SAID[15]),
    "Russian, a name the stemmer cuts differently": ("Максим", SAID[16]),
    "German, a plural its stemmer keeps": ("Sofas", SAID[17]),
}


@pytest.mark.parametrize("case", list(FINDS))
async def test_a_word_in_any_language_finds_its_message(sessions, case):
    query, wanted = FINDS[case]
    scope = await member_who_said(sessions)
    async with sessions() as session:
        found = await recall_search(session, scope, query)
    assert found.hits, f"{query!r} found nothing"
    assert found.hits[0].text == wanted


async def test_words_of_other_messages_do_not_match(sessions):
    scope = await member_who_said(sessions)
    async with sessions() as session:
        cat = await recall_search(session, scope, "ミソ")
        nothing = await recall_search(session, scope, "量子色力学")  # no pair of it was said
        russian = await recall_search(session, scope, "Мурманск")
    assert [h.text for h in cat.hits] == [MISO]
    assert nothing.total == 0
    assert russian.total == 0


async def test_conversation_search_as_the_model_calls_it_finds_a_name_without_spaces(engine, fake):
    scope = await engine.agent("discord:1", "kana")
    for words in (MISO, "今日は雨が降っています", "週末は京都に行きたいです"):
        await talk(engine, scope, words)
    fake.brain = script(
        calls(tool_call("conversation_search", query="ミソ")),
        calls(tool_call("conversation_search", query="ミソについて")),
        say("ミソちゃんですね！"),
    )

    exchange = await talk(engine, scope, "うちの猫の名前、覚えてる？")

    name, longer = (shown_results(r)[0] for r in fake.chat_requests[-2:])
    assert name.startswith("Showing messages: page 1 of 1")
    assert MISO in name
    assert "京都" not in name and "雨" not in name
    assert MISO in longer  # the particle after the name changes nothing
    assert exchange.replies == ["ミソちゃんですね！"]


async def test_archival_memory_is_searched_the_same_way(sessions):
    notes = ["趣味はバードウォッチングで、オオルリが好き", "Die Katze heißt Mieze", "ok"]
    async with sessions() as session, session.begin():
        scope = await ensure_agent(session, "t", "notes", EngineConfig())
        store = AgentStore(session, scope, EngineConfig().max_message_tokens)
        for note in notes:
            await store.add_passage(note, T0, "agent")
    async with sessions() as session:
        bird = await archival_search(session, scope, "オオルリ", None)
        cat = await archival_search(session, scope, "Katzen heissen", None)
    assert [h.text for h in bird.hits] == [notes[0]]
    assert [h.text for h in cat.hits] == [notes[1]]


async def test_the_migration_reads_every_stored_message_again_and_the_downgrade_undoes_it(
    pg_url,
):
    schema = f"words_in_every_language_{os.getpid()}"
    engine = make_engine(await serve_as_app_role(pg_url, schema), schema=schema)
    sessions = async_sessionmaker(engine, expire_on_commit=False)

    async def first_found(query: str) -> str | None:
        async with sessions() as session:
            page = await recall_search(session, scope, query)
        return page.hits[0].text if page.hits else None

    async def english_words() -> bool:
        """Every message's words as Postgres' `english` configuration reads them, and the
        word index listing exactly those."""
        async with sessions() as session:
            return await session.scalar(
                text(
                    "SELECT bool_and(tsv = to_tsvector('english', search_text)) AND "
                    "(SELECT count(*) FROM message_words) = "
                    "(SELECT sum(length(to_tsvector('english', search_text))) FROM messages) "
                    "FROM messages"
                )
            )

    try:
        async with engine.connect() as connection:
            await connection.run_sync(_alembic, command.upgrade, "0027")
            await connection.commit()
        scope = await member_who_said(sessions, SAID[:4] + SAID[15:])
        assert await english_words()  # where each Japanese sentence was one word

        assert await migrate(engine, 16) == 16  # to the newest revision, 0028 among them
        assert not await english_words()
        assert await first_found("ミソ") == MISO
        assert await first_found("王小明") == SAID[2]
        assert await first_found("walking dogs") == SAID[15]

        async with engine.connect() as connection:
            await connection.run_sync(_alembic, command.downgrade, "0027")
            await connection.commit()
        assert await english_words()
        assert await migrate(engine, 16) == 16
        assert await first_found("ミソ") == MISO
    finally:
        await engine.dispose()


def test_a_long_hit_is_shown_around_a_name_written_without_spaces():
    before = "今日は朝から雨が降っていて、電車も遅れていました。" * 20
    long = before + MISO + "それから仕事に行きました。" * 10
    shown = snippet(long, "ミソについて")
    assert MISO in shown and shown.startswith("…")
    assert len(shown) <= 402
