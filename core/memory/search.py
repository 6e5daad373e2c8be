"""Recall and archival search, paginated.

Text search ranks by the sum of inverse document frequencies of the question's key words
that a row contains (BM25 without term-frequency saturation, which suits short chat turns):
a row need not contain every word, rare words count for more, and stemming comes from
Postgres' `english` configuration. Archival search uses pgvector cosine distance over the
HNSW index when an embedder is configured, with iterative scans so that filtering to one
agent still fills the page.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from core.scope import Scope


@dataclass(frozen=True)
class Hit:
    id: int
    text: str
    kind: str  # a message's role, or a passage's source
    created_at: datetime


@dataclass(frozen=True)
class Page:
    hits: list[Hit]
    page: int
    pages: int
    total: int


# Ranked keyword search over one table's `tsv`; `{table}` and `{filter}` are fixed strings.
# MATERIALIZED: inlined, a stale row estimate made Postgres rerun the corpus count per row.
_KEYWORD_SQL = """
WITH terms AS MATERIALIZED (
    SELECT DISTINCT lexeme, to_tsquery('simple', quote_literal(lexeme)) AS tq
    FROM unnest(tsvector_to_array(to_tsvector('english', :query))) AS lexeme
),
corpus AS MATERIALIZED (
    SELECT count(*) AS n FROM {table} r
    WHERE r.tenant_id = :tenant AND r.agent_id = :agent {filter}
),
weights AS MATERIALIZED (
    SELECT t.tq, ln(1 + (corpus.n - count(r.id) + 0.5) / (count(r.id) + 0.5)) AS idf
    FROM terms t CROSS JOIN corpus
    JOIN {table} r ON r.tenant_id = :tenant AND r.agent_id = :agent AND r.tsv @@ t.tq {filter}
    GROUP BY t.lexeme, t.tq, corpus.n
),
scored AS (
    SELECT r.id, sum(w.idf) / (1 + 0.1 * ln(1 + length(r.tsv))) AS score
    FROM weights w
    JOIN {table} r ON r.tenant_id = :tenant AND r.agent_id = :agent AND r.tsv @@ w.tq {filter}
    GROUP BY r.id, r.tsv
)
SELECT r.id, {text_col} AS text, {kind_col} AS kind, r.created_at, count(*) OVER () AS total
FROM scored s JOIN {table} r ON r.id = s.id
ORDER BY s.score DESC, r.id DESC
LIMIT :limit OFFSET :offset
"""


def _page_of(rows: list[Any], page: int, page_size: int, total: int | None = None) -> Page:
    if total is None:
        total = int(rows[0].total) if rows else 0
    pages = max(1, math.ceil(total / page_size))
    hits = [Hit(r.id, r.text, r.kind, r.created_at) for r in rows]
    return Page(hits, page, pages, total)


async def _keyword_search(
    session: AsyncSession,
    scope: Scope,
    table: str,
    query: str,
    page: int,
    page_size: int,
    skip_event: int | None = None,
) -> Page:
    if table == "messages":
        sql = _KEYWORD_SQL.format(
            table="messages",
            filter="AND r.search_text IS NOT NULL AND coalesce(r.event_id, 0) <> :skip",
            text_col="r.search_text",
            kind_col="r.role",
        )
    else:
        sql = _KEYWORD_SQL.format(
            table="passages", filter="", text_col="r.text", kind_col="coalesce(r.source, '')"
        )
    rows = (
        await session.execute(
            text(sql),
            {
                "query": query,
                "tenant": scope.tenant_id,
                "agent": scope.agent_id,
                "limit": page_size,
                "offset": (page - 1) * page_size,
                "skip": skip_event or -1,  # event ids are positive
            },
        )
    ).all()
    if not rows and page > 1:  # past the end: report the real number of pages
        first = await _keyword_search(session, scope, table, query, 1, page_size, skip_event)
        return Page([], page, first.pages, first.total)
    return _page_of(list(rows), page, page_size)


async def recall_search(
    session: AsyncSession,
    scope: Scope,
    query: str,
    page: int = 1,
    page_size: int = 5,
    skip_event: int | None = None,
) -> Page:
    """Messages (either side) sharing key words with `query`, best first.

    `skip_event` leaves out the messages of the event being handled (the question itself).
    """
    return await _keyword_search(session, scope, "messages", query, page, page_size, skip_event)


async def recall_by_date(
    session: AsyncSession,
    scope: Scope,
    start: date,
    end: date,
    timezone: str = "UTC",
    page: int = 1,
    page_size: int = 5,
) -> Page:
    """Messages from `start` to `end` inclusive (dates in the member's time zone), oldest first."""
    rows = (
        await session.execute(
            text(
                """
                SELECT id, search_text AS text, role AS kind, created_at,
                       count(*) OVER () AS total
                FROM messages
                WHERE tenant_id = :tenant AND agent_id = :agent AND search_text IS NOT NULL
                  AND created_at >= (CAST(:start AS timestamp) AT TIME ZONE :tz)
                  AND created_at < ((CAST(:end AS timestamp) + interval '1 day') AT TIME ZONE :tz)
                ORDER BY id LIMIT :limit OFFSET :offset
                """
            ),
            {
                "tenant": scope.tenant_id,
                "agent": scope.agent_id,
                "tz": timezone,
                "start": start,
                "end": end,
                "limit": page_size,
                "offset": (page - 1) * page_size,
            },
        )
    ).all()
    if not rows and page > 1:
        first = await recall_by_date(session, scope, start, end, timezone, 1, page_size)
        return Page([], page, first.pages, first.total)
    return _page_of(list(rows), page, page_size)


async def archival_search(
    session: AsyncSession,
    scope: Scope,
    query: str,
    embedding: list[float] | None,
    page: int = 1,
    page_size: int = 5,
) -> Page:
    """Passages nearest in meaning to `query` (or by key words when there is no embedding)."""
    if embedding is None:
        return await _keyword_search(session, scope, "passages", query, page, page_size)
    params = {"tenant": scope.tenant_id, "agent": scope.agent_id}
    total = int(
        await session.scalar(
            text(
                "SELECT count(*) FROM passages WHERE tenant_id = :tenant AND agent_id = :agent "
                "AND embedding IS NOT NULL"
            ),
            params,
        )
        or 0
    )
    await session.execute(text("SET LOCAL hnsw.iterative_scan = relaxed_order"))
    rows = (
        await session.execute(
            text(
                """
                SELECT * FROM (
                    SELECT id, text, coalesce(source, '') AS kind, created_at,
                           embedding <=> CAST(:q AS vector) AS distance
                    FROM passages
                    WHERE tenant_id = :tenant AND agent_id = :agent AND embedding IS NOT NULL
                    ORDER BY embedding <=> CAST(:q AS vector)
                    LIMIT :limit OFFSET :offset
                ) nearest ORDER BY distance
                """
            ),
            {
                **params,
                "q": str(list(embedding)),
                "limit": page_size,
                "offset": (page - 1) * page_size,
            },
        )
    ).all()
    return _page_of(list(rows), page, page_size, total)
