"""Messages and passages ranked by key words, from each agent's word index (core.memory.terms).

    weights(session, scope, query, index)   the query's words the agent's rows hold: each
                                            word, its inverse document frequency and counts
    ranked(session, scope, weights, limit, offset, skip, index)
                                            the best rows holding any of them, best first
    best(session, scope, weights, limit, skip, index)
                                            the ids of the best `limit`
    naming_the_same(session, scope, ids, held, limit, skip, index)
                                            the best rows holding the rare names `ids` write
    rows_sql(index)                         the query of rows `:ids` with their text
    MESSAGES, PASSAGES                      the two indexes: `message_words`, `passage_words`
    QUERY_LEXEMES                           the most words a query is weighed by, its rarest

A message's score is the sum of the weights of the query's words it holds, over
1 + 0.1 ln(1 + its number of distinct words): BM25 without term-frequency saturation, which
suits short chat turns. A word's weight is ln(1 + (N - df + 0.5) / (df + 0.5)), N the
agent's searchable messages, df those holding the word, both read from `message_terms`
(for passages, `passage_terms`). The rows holding the words are read from
`message_words` / `passage_words` by index (an index-only scan of (tenant, agent, word),
the word count beside each id) and scored in one aggregate. A text's words, stored or asked,
are read by one function in the database, `companion_lexemes` (migration 0028: any script,
folded and stemmed). Not from the GIN indexes of `tsv`: inside the member's wall Postgres
may not use them (migration 0021), and reads every message or passage of the agent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from core.memory.ranking import named_things
from core.scope import Scope

# A query is weighed by its QUERY_LEXEMES rarest words the agent's rows hold. The scoring
# reads every row holding any of them, so a long query of common words (1,000 characters of
# them, which `conversation_search` takes and a member can ask the model to send) read a
# large part of the agent's index: at 100,000 messages and passages 170 ms a recall search
# and 280 ms an archival one (p95 260 and 320), against 20 for a question (p95 26); 55 and
# 88 ms with the cap (bench/README.md, "Long queries"). A question has a handful of words,
# far fewer; the rarest are the ones that rank, and the cheapest to read. Round, chosen
# before measuring: LoCoMo's figures are the same with it.
QUERY_LEXEMES = 32

# The query's words the agent's rows hold, each weighed by the counts in {terms}.{rows}:
# the QUERY_LEXEMES rarest of them.
_WEIGHTS_SQL = """
SELECT lexeme, idf, held, corpus FROM (
    SELECT t.lexeme,
           CAST(ln(1 + (n.{rows} - s.{rows} + 0.5) / (s.{rows} + 0.5)) AS float8) AS idf,
           s.{rows} AS held, n.{rows} AS corpus
    FROM (
        SELECT DISTINCT lexeme FROM unnest(companion_query_words(:query)) lexeme
    ) t
    JOIN {terms} s ON s.tenant_id = :tenant AND s.agent_id = :agent AND s.lexeme = t.lexeme
    JOIN {terms} n ON n.tenant_id = :tenant AND n.agent_id = :agent AND n.lexeme = ''
    WHERE s.{rows} > 0
    ORDER BY s.{rows}, t.lexeme
    LIMIT {most}
) w
ORDER BY lexeme
"""

# Each row holding one of the words, scored; {skip}: the messages of the event being
# handled left out (found by `messages_event`, once), for messages.
_SCORED_SQL = """
SELECT w.{id} AS id, sum(t.idf) / (1 + 0.1 * ln(1 + w.words)) AS score
FROM unnest(CAST(:lexemes AS text[]), CAST(:idfs AS float8[])) AS t(lexeme, idf)
JOIN {words} w
  ON w.tenant_id = :tenant AND w.agent_id = :agent AND w.lexeme = t.lexeme
{skip}
GROUP BY w.{id}, w.words
"""
# `{alias}.message_id` is not one of the messages of the event `:skip` (read once).
NOT_OF_EVENT = """{alias}.message_id <> ALL (ARRAY(
    SELECT m.id FROM messages m
    WHERE m.tenant_id = :tenant AND m.event_id = :skip AND m.agent_id = :agent
))"""
# A message index's {skip}: the messages of the event `:skip` left out.
_SKIP_EVENT = "WHERE " + NOT_OF_EVENT.format(alias="w")

_BEST_SQL = """
SELECT id, score FROM ({scored}) s ORDER BY score DESC, id DESC LIMIT :limit
"""

# The rows scoring at least :ratio of the best one, a page of them, and how many they are.
_PAGE_SQL = """
SELECT r.id, {text} AS text, {kind} AS kind, r.created_at, s.total, s.score
FROM (
    SELECT id, score, count(*) OVER () AS total FROM (
        SELECT id, score, max(score) OVER () AS top FROM ({scored}) a
    ) s
    WHERE score >= :ratio * top
    ORDER BY score DESC, id DESC LIMIT :limit OFFSET :offset
) s
JOIN {rows} r ON r.tenant_id = :tenant AND r.agent_id = :agent AND r.id = s.id
ORDER BY s.score DESC, s.id DESC
"""


@dataclass(frozen=True)
class Index:
    """One word index: its table and id column, and the rows it points at."""

    words: str
    id: str
    rows: str
    text: str  # the row's text, as a column of `r`
    kind: str  # a message's role, a passage's source
    weights_sql: str
    skip_event: str  # the scoring's clause leaving an event's rows out ("" for none)


MESSAGES = Index(
    "message_words",
    "message_id",
    "messages",
    "r.search_text",
    "r.role",
    _WEIGHTS_SQL.format(terms="message_terms", rows="messages", most=QUERY_LEXEMES),
    _SKIP_EVENT,
)
PASSAGES = Index(
    "passage_words",
    "passage_id",
    "passages",
    "r.text",
    "coalesce(r.source, '')",
    _WEIGHTS_SQL.format(terms="passage_terms", rows="passages", most=QUERY_LEXEMES),
    "",  # a passage is no event's message
)


@dataclass(frozen=True)
class Weight:
    lexeme: str  # the word as `companion_lexemes` (migration 0028) stores it
    idf: float
    held: int  # the agent's messages holding it
    corpus: int  # the agent's searchable messages


async def weights(
    session: AsyncSession, scope: Scope, query: str, index: Index = MESSAGES
) -> list[Weight]:
    """The query's words (every lexeme they may be stored as, `companion_query_words`)
    that the agent's rows hold, weighed: the `QUERY_LEXEMES` rarest, in lexeme order."""
    rows = await session.execute(
        text(index.weights_sql),
        {"query": query, "tenant": scope.tenant_id, "agent": scope.agent_id},
    )
    return [Weight(row.lexeme, row.idf, row.held, row.corpus) for row in rows]


def _params(scope: Scope, words: list[Weight], skip_event: int | None) -> dict[str, Any]:
    return {
        "tenant": scope.tenant_id,
        "agent": scope.agent_id,
        "lexemes": [w.lexeme for w in words],
        "idfs": [w.idf for w in words],
        "skip": skip_event,
    }


def _scored(index: Index, skip_event: int | None) -> str:
    """The scoring statement; `skip_event` leaves that event's messages out."""
    skip = index.skip_event if skip_event is not None else ""
    return _SCORED_SQL.format(id=index.id, words=index.words, skip=skip)


async def ranked(
    session: AsyncSession,
    scope: Scope,
    words: list[Weight],
    limit: int,
    offset: int = 0,
    skip_event: int | None = None,
    index: Index = MESSAGES,
    ratio: float = 0.0,
) -> list[Any]:
    """Rows (id, text, kind, created_at, total matches, score) of the rows holding any of
    `words` and scoring at least `ratio` of the best, best first, from `offset`; the
    messages of `skip_event` left out."""
    if not words:
        return []
    scored = _scored(index, skip_event)
    sql = _PAGE_SQL.format(scored=scored, text=index.text, kind=index.kind, rows=index.rows)
    params = {
        **_params(scope, words, skip_event),
        "limit": limit,
        "offset": offset,
        "ratio": ratio,
    }
    return list(await session.execute(text(sql), params))


async def best(
    session: AsyncSession,
    scope: Scope,
    words: list[Weight],
    limit: int,
    skip_event: int | None = None,
    index: Index = MESSAGES,
) -> list[int]:
    """The ids of the `limit` best rows holding any of `words` (`ranked`'s order)."""
    return [
        row_id for row_id, _ in await best_scored(session, scope, words, limit, skip_event, index)
    ]


async def best_scored(
    session: AsyncSession,
    scope: Scope,
    words: list[Weight],
    limit: int,
    skip_event: int | None = None,
    index: Index = MESSAGES,
) -> list[tuple[int, float]]:
    """(id, score) of the `limit` best rows holding any of `words`, best first."""
    if not words:
        return []
    sql = _BEST_SQL.format(scored=_scored(index, skip_event))
    params = {**_params(scope, words, skip_event), "limit": limit}
    return [(row.id, row.score) for row in await session.execute(text(sql), params)]


_ROWS_SQL = """
SELECT r.id, {text} AS text, {kind} AS kind, r.created_at FROM {rows} r
WHERE r.tenant_id = :tenant AND r.agent_id = :agent AND r.id = ANY(:ids)
"""


def rows_sql(index: Index) -> str:
    """The agent's rows `:ids` of `index` (id, text, kind, created_at), in no order."""
    return _ROWS_SQL.format(text=index.text, kind=index.kind, rows=index.rows)


async def naming_the_same(
    session: AsyncSession,
    scope: Scope,
    ids: list[int],
    held: float,
    limit: int,
    skip_event: int | None = None,
    index: Index = MESSAGES,
) -> list[int]:
    """The ids of the `limit` best rows holding the names (`ranking.named_things`) that the
    rows `ids` write, those of them at most a share `held` of the agent's rows hold (two
    rows at least): a name said in every greeting, or "I'm", is left out."""
    params = {"tenant": scope.tenant_id, "agent": scope.agent_id, "ids": ids}
    names = named_things(r.text for r in await session.execute(text(rows_sql(index)), params))
    if not names:
        return []
    words = await weights(session, scope, names, index)
    rare = [w for w in words if w.held <= max(2, held * w.corpus)]
    return await best(session, scope, rare, limit, skip_event, index)
