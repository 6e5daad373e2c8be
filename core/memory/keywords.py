"""Messages ranked by key words, weighed by the agent's term statistics (core.memory.terms).

    weights(session, scope, query)     the query's words the agent's messages hold: each
                                       word's tsquery, its inverse document frequency and counts
    ranked(session, scope, weights, limit, offset, skip, total)
                                       the best messages holding any of them, best first
    best(session, scope, weights, limit, skip)
                                       the ids of the best `limit`, scoring a shortlist first

A message's score is the sum of the weights of the query's words it holds, over
1 + 0.1 ln(1 + its number of distinct words): BM25 without term-frequency saturation, which
suits short chat turns. A word's weight is ln(1 + (N - df + 0.5) / (df + 0.5)), N the
agent's searchable messages, df those holding the word, both read from `message_terms`
(kept as messages come and go) instead of counted on every search. The scoring reads each
matching message once (one bitmap scan of the GIN index on `tsv`) and sums its words'
weights in one expression, with the weights as parameters: no per-row subquery, grouping or
second pass. Weights stay Postgres numerics all the way, so the order is the one that
counting per query gave, to the last digit.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from core.memory.ranking import shortlist
from core.scope import Scope

_WEIGHTS_SQL = """
SELECT CAST(to_tsquery('simple', quote_literal(t.lexeme)) AS text) AS tq,
       ln(1 + (n.messages - s.messages + 0.5) / (s.messages + 0.5)) AS idf,
       s.messages AS held, n.messages AS corpus
FROM (
    SELECT DISTINCT lexeme FROM unnest(tsvector_to_array(to_tsvector('english', :query))) lexeme
) t
JOIN message_terms s ON s.tenant_id = :tenant AND s.agent_id = :agent AND s.lexeme = t.lexeme
JOIN message_terms n ON n.tenant_id = :tenant AND n.agent_id = :agent AND n.lexeme = ''
WHERE s.messages > 0
ORDER BY t.lexeme
"""

# {score}: the weights of the words a message holds, summed; {any}: it holds one of them.
_RANKED_SQL = """
SELECT r.id, r.search_text AS text, r.role AS kind, r.created_at{total},
       ({score}) / (1 + 0.1 * ln(1 + length(r.tsv))) AS score
FROM messages r
WHERE r.tenant_id = :tenant AND r.agent_id = :agent AND r.search_text IS NOT NULL
  AND coalesce(r.event_id, 0) <> :skip AND r.tsv @@ ({any})
ORDER BY score DESC, r.id DESC
LIMIT :limit OFFSET :offset
"""
MARGIN = 1e-9  # relative: rounding in Postgres' and Python's arithmetic never reaches it


@dataclass(frozen=True)
class Weight:
    tq: str  # the word as a tsquery ('simple' configuration), in its text form
    idf: Decimal
    held: int  # the agent's messages holding it
    corpus: int  # the agent's searchable messages


async def weights(session: AsyncSession, scope: Scope, query: str) -> list[Weight]:
    """The query's words (its `english` lexemes) that the agent's messages hold, weighed."""
    rows = await session.execute(
        text(_WEIGHTS_SQL),
        {"query": query, "tenant": scope.tenant_id, "agent": scope.agent_id},
    )
    return [Weight(row.tq, row.idf, row.held, row.corpus) for row in rows]


async def ranked(
    session: AsyncSession,
    scope: Scope,
    words: list[Weight],
    limit: int,
    offset: int = 0,
    skip_event: int | None = None,
    total: bool = False,
    among: str | None = None,
) -> list[Any]:
    """Rows (id, text, kind, created_at, `total` matches when asked, score) of the messages
    holding any of `words` (those matching the tsquery `among` when given), best first; the
    messages of `skip_event` left out."""
    if not words:
        return []
    params: dict[str, Any] = {
        "tenant": scope.tenant_id,
        "agent": scope.agent_id,
        "skip": skip_event or -1,  # event ids are positive
        "limit": limit,
        "offset": offset,
    }
    held, any_of = [], []
    for i, word in enumerate(words):
        params[f"w{i}"], params[f"idf{i}"] = word.tq, word.idf
        held.append(
            f"CASE WHEN r.tsv @@ CAST(:w{i} AS tsquery) THEN CAST(:idf{i} AS numeric) ELSE 0 END"
        )
        any_of.append(f"CAST(:w{i} AS tsquery)")
    if among is not None:
        params["among"] = among
    sql = _RANKED_SQL.format(
        total=", count(*) OVER () AS total" if total else "",
        any="CAST(:among AS tsquery)" if among is not None else " || ".join(any_of),
        score=" + ".join(held),
    )
    return list(await session.execute(text(sql), params))


async def best(
    session: AsyncSession,
    scope: Scope,
    words: list[Weight],
    limit: int,
    skip_event: int | None = None,
) -> list[int]:
    """The ids of the `limit` best messages holding any of `words`, best first (exactly
    `ranked`'s), reading the shortlist's messages alone when that settles it."""
    if not words:
        return []
    plan = shortlist([(float(w.idf), w.held) for w in words], words[0].corpus, limit)
    if plan is not None:
        among = " | ".join(
            "(" + " & ".join(f"({words[i].tq})" for i in group) + ")" for group in plan.groups
        )
        rows = await ranked(session, scope, words, limit, 0, skip_event, among=among)
        if len(rows) == limit and rows[-1].score > plan.bound * (1 + MARGIN):
            return [row.id for row in rows]
    return [row.id for row in await ranked(session, scope, words, limit, 0, skip_event)]
