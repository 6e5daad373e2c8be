"""Recall and archival search, paginated: full text and vectors, fused.

    recall_search(..., embedding, speaker, days)  messages: key words and meaning, fused by
                                       rank; the named speaker's own messages, and those of
                                       the days the query names, first
    recall_by_date(...)                messages of a date range, oldest first
    archival_search(..., embedding)    passages: the same fusion

Text search ranks by the sum of inverse document frequencies of the question's key words
that a row contains (BM25 without term-frequency saturation, which suits short chat turns):
a row need not contain every word, rare words count for more, and a text's words are read
the same way in every language when it is stored and when it is asked (migration 0028:
character pairs for Chinese, Japanese and Korean, case, accents and width folded, each
language's stemmer); the rows holding the words are found in the agent's
word index (core.memory.keywords), which Postgres may use inside the member's wall. With a
query embedding, the nearest rows by cosine
distance (pgvector HNSW, iterative scans so that filtering to one agent still fills the
list) are ranked too, and the two lists are fused by reciprocal rank (`fuse`): a row found
by both rises, and a row without a vector yet is still found by its words. The fused list
is `DEPTH` deep per side, so "page p of n" counts that list. When the query names one
speaker (`speaker`: a role), that speaker's messages of the fused list are ranked once more,
so they come first without the other side's being left out; so are the messages naming the
rare names the best hits name; when it names days (`days`, core.memory.dates), the messages
of those days are ranked once more the same way, and the best few of them count as results.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from core.memory import keywords
from core.memory.dates import Days
from core.memory.ranking import (
    ANCHORS,
    CONTEXT_ANCHORS,
    DATE_RESULTS,
    DATE_WEIGHT,
    DEPTH,
    ENTITY_HELD,
    ENTITY_TOP,
    ENTITY_WEIGHT,
    NEIGHBOUR_WEIGHTS,
    RESULTS_CAP,
    SPEAKER_WEIGHT,
    WORD_RATIO,
    Closeness,
    close_enough,
    fuse,
    word_matches,
)
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
    matched: int | None = None  # more than `total` matched: only the best `total` are told


def _page_of(rows: list[Any], page: int, page_size: int, total: int | None = None) -> Page:
    if total is None:
        total = int(rows[0].total) if rows else 0
    pages = max(1, math.ceil(total / page_size))
    hits = [Hit(r.id, r.text, r.kind, r.created_at) for r in rows]
    return Page(hits, page, pages, total)


async def recall_search(
    session: AsyncSession,
    scope: Scope,
    query: str,
    page: int = 1,
    page_size: int = 5,
    skip_event: int | None = None,
    embedding: Sequence[float] | None = None,
    speaker: str | None = None,
    closeness: Closeness | None = None,
    days: Days | None = None,
    timezone: str = "UTC",
) -> Page:
    """Messages (either side) sharing key words with `query`, or near it in meaning, best first.

    `skip_event` leaves out the messages of the event being handled (the question itself).
    `speaker` ("user" or "assistant"): the side the query asks about, whose messages rank
    higher. `days`: the days the query names (in `timezone`), whose messages rank higher.
    Without `embedding`, key words alone, and every match counts in the total.
    """
    if embedding is None:
        return await _by_words(session, scope, query, page, page_size, skip_event)
    return await _hybrid_search(
        session,
        scope,
        "messages",
        query,
        embedding,
        page,
        page_size,
        skip_event,
        speaker,
        closeness,
        days,
        timezone,
    )


async def _by_words(
    session: AsyncSession,
    scope: Scope,
    query: str,
    page: int,
    page_size: int,
    skip_event: int | None,
    index: keywords.Index = keywords.MESSAGES,
) -> Page:
    words = await keywords.weights(session, scope, query, index)
    offset = (page - 1) * page_size
    rows = await keywords.ranked(
        session, scope, words, page_size, offset, skip_event, index, WORD_RATIO
    )
    if not rows and page > 1:  # past the end: report the real number of pages
        first = await keywords.ranked(session, scope, words, 1, 0, skip_event, index, WORD_RATIO)
        return _page_of([], page, page_size, int(first[0].total) if first else 0)
    return _page_of(rows, page, page_size)


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
    embedding: Sequence[float] | None,
    page: int = 1,
    page_size: int = 5,
    closeness: Closeness | None = None,
) -> Page:
    """Passages sharing key words with `query` or near it in meaning (key words alone
    when there is no embedding)."""
    if embedding is None:
        return await _by_words(session, scope, query, page, page_size, None, keywords.PASSAGES)
    return await _hybrid_search(
        session,
        scope,
        "passages",
        query,
        embedding,
        page,
        page_size,
        closeness=closeness,
    )


# ---------------------------------------------------------------- fusion

# The nearest rows by cosine distance, read from the vectors alone: a message's is in
# `message_vectors` (migration 0018), which only searchable messages have (0025), a
# passage's in `passage_vectors` (0026).
_NEAREST_SQL = """
SELECT {vector_id} AS id, v.embedding <=> CAST(:q AS halfvec({dim})) AS distance FROM {vectors}
WHERE v.tenant_id = :tenant AND v.agent_id = :agent AND v.embedding IS NOT NULL {vector_filter}
ORDER BY v.embedding <=> CAST(:q AS halfvec({dim}))
LIMIT :limit
"""

# For the rest of the search's transaction: the index walks on past rows the filter drops,
# and every statement is planned for its own values. A prepared statement gets a generic
# plan after five runs, and for the nearest rows that plan sorts all of the member's
# vectors instead of walking the index: 4.5 s instead of 25 ms at 1536 dimensions and 30k
# passages.
_NEAREST_SETTINGS = """
SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true),
       set_config('plan_cache_mode', 'force_custom_plan', true)
"""

# The messages next to each anchor (two before, two after; `step` -2..2), in anchor order.
_NEIGHBOURS_SQL = """
SELECT a.pos, n.id, n.step FROM unnest(CAST(:ids AS bigint[])) WITH ORDINALITY AS a(id, pos)
CROSS JOIN LATERAL (
    SELECT b.id, -row_number() OVER (ORDER BY b.id DESC) AS step FROM (
        SELECT r.id FROM messages r
        WHERE r.tenant_id = :tenant AND r.agent_id = :agent AND r.id < a.id {filter}
        ORDER BY r.id DESC LIMIT 2
    ) b
    UNION ALL
    SELECT f.id, row_number() OVER (ORDER BY f.id) AS step FROM (
        SELECT r.id FROM messages r
        WHERE r.tenant_id = :tenant AND r.agent_id = :agent AND r.id > a.id {filter}
        ORDER BY r.id LIMIT 2
    ) f
) n
ORDER BY a.pos, abs(n.step), n.step
"""

_ROLES_SQL = """
SELECT r.id FROM messages r
WHERE r.tenant_id = :tenant AND r.agent_id = :agent AND r.id = ANY(:ids) AND r.role = :role
"""

# Which of `ids` were written on the days from :first to :last (the member's calendar).
_ON_DAYS_SQL = """
SELECT r.id FROM messages r
WHERE r.tenant_id = :tenant AND r.agent_id = :agent AND r.id = ANY(:ids)
  AND r.created_at >= (CAST(:first AS timestamp) AT TIME ZONE :tz)
  AND r.created_at < ((CAST(:last AS timestamp) + interval '1 day') AT TIME ZONE :tz)
"""


def _columns(table: str) -> dict[str, str]:
    if table == "messages":
        return {
            "vectors": "message_vectors v",
            "vector_id": "v.message_id",
            "vector_filter": "AND " + keywords.NOT_OF_EVENT.format(alias="v"),
            "filter": "AND r.search_text IS NOT NULL AND coalesce(r.event_id, 0) <> :skip",
        }
    return {
        "vectors": "passage_vectors v",
        "vector_id": "v.passage_id",
        "vector_filter": "",
        "filter": "",
    }


async def _hybrid_search(
    session: AsyncSession,
    scope: Scope,
    table: str,
    query: str,
    embedding: Sequence[float],
    page: int,
    page_size: int,
    skip_event: int | None = None,
    speaker: str | None = None,
    closeness: Closeness | None = None,
    days: Days | None = None,
    timezone: str = "UTC",
) -> Page:
    closeness = closeness or Closeness()
    columns = _columns(table)
    params = {
        "tenant": scope.tenant_id,
        "agent": scope.agent_id,
        "skip": skip_event or -1,  # event ids are positive
        "limit": DEPTH,
    }
    index = keywords.MESSAGES if table == "messages" else keywords.PASSAGES
    words = await keywords.weights(session, scope, query, index)
    scored = await keywords.best_scored(session, scope, words, DEPTH, skip_event, index)
    by_words = [row_id for row_id, _ in scored]
    await session.execute(text(_NEAREST_SETTINGS))
    vector = str([float(x) for x in embedding])
    nearest_sql = _NEAREST_SQL.format(**columns, dim=len(embedding))  # as the index is made
    nearest = (await session.execute(text(nearest_sql), {**params, "q": vector})).all()
    by_meaning = [r.id for r in nearest]
    similar = [(r.id, 1 - r.distance) for r in nearest]
    matched = word_matches(scored) | close_enough(similar, closeness.floor, closeness.margin)
    fused = fuse([by_words, by_meaning])
    if table == "messages" and fused:
        anchors = fused[:ANCHORS]
        near, further, around = await _neighbours(session, columns, params, anchors, matched)
        rankings, weights = [by_words, by_meaning, near, further], list(NEIGHBOUR_WEIGHTS)
        fused = fuse(rankings, weights)
        matched |= around
        if speaker is not None:
            said = {
                r.id
                for r in await session.execute(
                    text(_ROLES_SQL), {**params, "ids": fused, "role": speaker}
                )
            }
            rankings.append([row_id for row_id in fused if row_id in said])
            weights.append(SPEAKER_WEIGHT)
            fused = fuse(rankings, weights)
        linked = await keywords.naming_the_same(
            session, scope, fused[:ENTITY_TOP], ENTITY_HELD, DEPTH, skip_event
        )
        if linked:
            rankings.append(linked)
            weights.append(ENTITY_WEIGHT)
            fused = fuse(rankings, weights)
        if days is not None:
            on_days = await _on_days(session, params, fused, days, timezone)
            rankings.append(on_days)
            fused = fuse(rankings, [*weights, DATE_WEIGHT])
            matched |= set(on_days[:DATE_RESULTS])
    fused = [row_id for row_id in fused if row_id in matched]  # the order of all, kept
    matches = len(fused)
    if table == "messages":
        fused = fused[:RESULTS_CAP]
    wanted = fused[(page - 1) * page_size : page * page_size]
    found = {}
    if wanted:
        rows = text(keywords.rows_sql(index))
        result = await session.execute(rows, {**params, "ids": wanted})
        found = {r.id: Hit(r.id, r.text, r.kind, r.created_at) for r in result}
    hits = [found[row_id] for row_id in wanted if row_id in found]
    pages = max(1, math.ceil(len(fused) / page_size))
    return Page(hits, page, pages, len(fused), matches if matches > len(fused) else None)


async def _on_days(
    session: AsyncSession, params: dict[str, Any], ids: list[int], days: Days, timezone: str
) -> list[int]:
    """Those of `ids` written on `days`, in their order."""
    on_days = {
        r.id
        for r in await session.execute(
            text(_ON_DAYS_SQL),
            {**params, "ids": ids, "first": days.first, "last": days.last, "tz": timezone},
        )
    }
    return [row_id for row_id in ids if row_id in on_days]


async def _neighbours(
    session: AsyncSession,
    columns: dict[str, str],
    params: dict[str, Any],
    anchors: list[int],
    matched: set[int],
) -> tuple[list[int], list[int], set[int]]:
    """The messages right next to the anchors, and those one further, in the anchors' order;
    and those of the best `CONTEXT_ANCHORS` anchors in `matched` (results beside matches).

    An answer is often the turn after the one that shares the question's words ("what did
    you name him?" / "Rex!"), so the turns around the best hits are ranked too.
    """
    rows = await session.execute(
        text(_NEIGHBOURS_SQL.format(**columns)), {**params, "ids": anchors}
    )
    context = [anchor for anchor in anchors if anchor in matched][:CONTEXT_ANCHORS]
    near: list[int] = []
    further: list[int] = []
    around: set[int] = set()
    for row in rows:
        (near if abs(row.step) == 1 else further).append(row.id)
        if anchors[row.pos - 1] in context:
            around.add(row.id)
    return list(dict.fromkeys(near)), list(dict.fromkeys(further)), around
