"""The lookups of events that know no member are served by an index of their own.

`Seen` asks whether a platform's message is stored by its dedup key alone (Discord's
read-back, Slack's thread check), and the held messages (status `waiting`) are fetched after
a restart and released when stale, every 10 s in `companion run`. Without migration 0030
the first walked the whole unique key (tenant_id, agent_id, dedup_key) and the second read
every event: 263 ms and 508 ms at 600,000 events (ARCHITECTURE.md, Data). Nothing fails
when that happens, so the plans of the statements the product sends are read here, with
sequential and bitmap scans discouraged as a large table would.
"""

from __future__ import annotations

import re

from core.events import EventKind, InboundEvent
from tests.test_wall_plans import Statements


async def plans_of(sessions, work) -> list[str]:
    """The plans of the statements `work` sends that read events by a condition on them."""
    statements = Statements(sessions)
    await work()
    plans = []
    async with sessions() as session, session.begin():
        conn = await session.connection()
        for scan in ("seqscan", "bitmapscan"):
            await conn.exec_driver_sql(f"SET LOCAL enable_{scan} = off")
        for statement, parameters in statements.seen:
            if statement.lstrip().startswith("SELECT") and "FROM events" in statement:
                rows = await conn.exec_driver_sql("EXPLAIN " + statement, parameters)
                plans.append("\n".join(row[0] for row in rows))
    return plans


def index_scans(plan: str) -> list[tuple[str, str]]:
    """(index, its Index Cond) of each index scan of events in the plan."""
    lines = plan.splitlines()
    found = []
    for number, line in enumerate(lines):
        scan = re.search(r"Index (?:Only )?Scan using (\w+) on events", line)
        if scan:
            cond = next(
                (
                    later.strip()
                    for later in lines[number + 1 :]
                    if later.strip().startswith("Index Cond:") or "->" in later
                ),
                "",
            )
            found.append((scan[1], cond if cond.startswith("Index Cond:") else ""))
    return found


async def test_lookups_by_dedup_key_alone_read_events_dedup_key(engine, sessions):
    for user in ("ann", "bob"):
        scope = await engine.agent("discord:1", user)
        for n in range(3):
            await engine.submit(
                scope, InboundEvent(EventKind.USER_MESSAGE, "hi", f"discord:msg:{user}{n}")
            )

    async def lookups() -> None:
        assert await engine.seen.stored("discord:msg:bob1")
        assert await engine.seen.settled(["discord:msg:ann0", "discord:msg:zed"]) == {
            "discord:msg:ann0"
        }

    plans = await plans_of(sessions, lookups)
    assert len(plans) == 2
    for plan in plans:
        assert [index for index, _ in index_scans(plan)] == ["events_dedup_key"], plan
        assert all("dedup_key" in cond for _, cond in index_scans(plan)), plan


async def test_held_messages_are_found_by_events_waiting(engine, sessions, clock):
    ann = await engine.agent("slack:T1", "ann")
    await engine.submit(ann, InboundEvent(EventKind.USER_MESSAGE, "done", "slack:C1:1"))
    await engine.submit(
        ann, InboundEvent(EventKind.USER_MESSAGE, "with files", "slack:C1:2"), hold=True
    )

    async def lookups() -> None:
        assert len(await engine.seen.held("slack:")) == 1
        clock.advance(minutes=5)
        assert await engine.release_stale() == 1

    plans = await plans_of(sessions, lookups)
    assert len(plans) == 2  # the held messages of a platform; the stale ones, locked
    for plan in plans:
        assert [index for index, _ in index_scans(plan)] == ["events_waiting"], plan
