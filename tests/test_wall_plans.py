"""Inside the member's wall, every search statement is served by an index.

A turn searches inside `enter_scope`, as the ordinary role Companion connects as, where
row-level security evaluates its policy before any condition that is not leakproof: a full
text match (`tsv @@ query`) there is never an index condition, only a filter applied to every
message of the agent (86 ms instead of 6 at 100,000 messages; bench/README.md). Nothing
fails when that happens, search just slows with every message, so the plans of the
statements the product sends are read here, inside the wall, with sequential and bitmap
scans discouraged as a large table would. In the scans of the word indexes, which read
thousands of entries, the wall reads the member once per statement (migration 0023).
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from sqlalchemy import event

from core.config import EngineConfig
from core.events import EventKind, InboundEvent
from core.memory.dates import Days
from core.memory.search import archival_search, recall_search
from core.memory.store import AgentStore
from core.scope import enter_scope

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


class Statements:
    """The SQL statements sent, but for EXPLAIN, SET and entering the wall."""

    def __init__(self, sessions) -> None:
        self.seen: list[tuple[str, Any]] = []
        event.listen(sessions.kw["bind"].sync_engine, "before_cursor_execute", self._keep)

    def _keep(self, _conn, _cursor, statement, parameters, *_: Any) -> None:
        if not statement.lstrip().startswith(("EXPLAIN", "SET")) and (
            "companion_enter" not in statement
        ):
            self.seen.append((statement, parameters))


async def plans_inside_the_wall(sessions, scope, search) -> list[str]:
    statements = Statements(sessions)
    async with sessions() as session, session.begin():
        await enter_scope(session, scope)
        await search(session)
        conn = await session.connection()
        entered = await conn.exec_driver_sql("SELECT current_setting('companion.agent_id')")
        assert entered.scalar() == str(scope.agent_id)  # the plans are the wall's
        for scan in ("seqscan", "bitmapscan"):
            await conn.exec_driver_sql(f"SET LOCAL enable_{scan} = off")
        plans = []
        for statement, parameters in statements.seen:
            rows = await conn.exec_driver_sql("EXPLAIN " + statement, parameters)
            plans.append("\n".join(row[0] for row in rows))
    return plans


def filters(plan: str) -> list[str]:
    return [line.strip() for line in plan.splitlines() if line.strip().startswith("Filter:")]


def word_scan_filters(plan: str) -> list[str]:
    """The filters of the scans of message_words and passage_words."""
    found, in_word_scan = [], False
    for number, line in enumerate(plan.splitlines()):
        if number == 0 or "->" in line:  # a plan node
            in_word_scan = " on message_words " in line or " on passage_words " in line
        elif in_word_scan and line.strip().startswith("Filter:"):
            found.append(line.strip())
    return found


async def test_searches_by_key_words_read_the_word_indexes_inside_the_wall(engine, sessions):
    ann = await engine.agent("discord:1", "ann")
    for said in ("I baked a lemon cake", "the cake had too much lemon", "tea, no sugar"):
        await engine.converse(ann, InboundEvent(EventKind.USER_MESSAGE, said))
    async with sessions() as session, session.begin():
        await enter_scope(session, ann)
        store = AgentStore(session, ann, EngineConfig().max_message_tokens)
        await store.add_passage("lemon cake: flour, sugar, two lemons", T0)
    vector = [1.0] + [0.0] * 15  # the test schema's 16 dimensions
    may = Days(date(2026, 5, 1), date(2026, 5, 31))
    searches = {
        "recall, words and meaning, a speaker and a day named": (
            lambda s: recall_search(s, ann, "lemon cake", 1, 5, 7, vector, "user", None, may),
            "message_words_pkey",
        ),
        "recall, words only": (
            lambda s: recall_search(s, ann, "lemon cake", 1, 5, 7),
            "message_words_pkey",
        ),
        "archival, words and meaning": (
            lambda s: archival_search(s, ann, "lemon cake", vector, 1, 5),
            "passage_words_lookup",
        ),
        "archival, words only": (
            lambda s: archival_search(s, ann, "lemon cake", None, 1, 5),
            "passage_words_lookup",
        ),
    }
    for label, (search, index) in searches.items():
        plans = await plans_inside_the_wall(sessions, ann, search)
        assert plans, label
        for plan in plans:
            for line in filters(plan):
                assert "@@" not in line, f"{label}: a text match applied row by row\n{plan}"
            for line in word_scan_filters(plan):  # migration 0023: once, not per entry
                assert "current_setting" not in line, f"{label}: the member read per row\n{plan}"
        assert any(index in plan for plan in plans), (label, plans)
