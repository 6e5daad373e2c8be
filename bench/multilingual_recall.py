"""Recall of `conversation_search` in six languages, on our own set (bench/multilingual_set.py).

    python bench/multilingual_recall.py [--embedder none|local|multilingual]
                                        [--agents 10] [--k 1,5,10] [--languages en,ja]

Each generated member becomes an agent whose recall storage holds their 108 messages as
past (out of the main context), with vectors from the product's own catch-up pass
(`core.memory.embeddings.embed_missing`) and the chosen embedder. Every query goes to what
`conversation_search` runs (`core.memory.tools.find_messages`), and the fact's message
counts as found at k when it is among the first k results (one gold message per query, so
recall@k and hit@k are the same). Printed per language (en is the English subset the
others are compared with) and per kind of query (name, question, keyword), with the result
counts the model is told, and how many of the queries were answered "nothing found".

Prints numbers only; no assertions. Starts an embedded Postgres in a temporary directory
unless --database-url is given.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bench.common import bench_database, machine, revision, server_version, settings_block, table
from bench.multilingual_set import LANGUAGES, Agent, build
from core.config import EngineConfig
from core.directory import ensure_agent
from core.memory import terms
from core.memory.embeddings import embed_missing
from core.memory.store import AgentStore
from core.memory.tools import ToolContext, find_messages
from core.models import Message, MessageVector
from core.ports import Embedder
from core.scope import Scope

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
COST: dict[str, float] = {}  # the embedding pass: messages, and CPU ms of this process each


def embedder_named(name: str) -> Embedder | None:
    """The embedder a deployment gets with COMPANION_EMBEDDING_MODEL=name (in-process ones:
    `local` is the default, all-MiniLM-L6-v2; `multilingual` is multilingual-e5-small)."""
    if name == "none":
        return None
    if name == "multilingual":
        from core.multilingual_embedder import MultilingualEmbedder, package_dir

        package_dir()  # not installed: one line saying how
        return MultilingualEmbedder()
    from core.local_embedder import LocalEmbedder

    if name != "local":
        raise SystemExit(f"no embedder {name!r}: none, local or multilingual")
    return LocalEmbedder()


async def load_agent(session: AsyncSession, agent: Agent, number: int) -> tuple[Scope, list[int]]:
    """The agent, its messages stored as past (an hour apart), and their ids in order."""
    scope = await ensure_agent(
        session, "multilingual", f"{agent.language}-{number}", EngineConfig(), agent.member
    )
    rows = [
        Message(
            tenant_id=scope.tenant_id,
            agent_id=scope.agent_id,
            role=role,
            content=words,
            search_text=words,
            in_context=False,
            created_at=START + timedelta(hours=i),
        )
        for i, (role, words) in enumerate(agent.messages)
    ]
    session.add_all(rows)
    await session.flush()
    session.add_all(
        MessageVector(message_id=m.id, tenant_id=m.tenant_id, agent_id=m.agent_id) for m in rows
    )
    await session.flush()
    await terms.rebuild(session, scope)
    return scope, [m.id for m in rows]


async def measure(
    sessions: async_sessionmaker[AsyncSession],
    agents: list[Agent],
    embedder: Embedder | None,
    ks: list[int],
) -> list[dict[str, object]]:
    """One row per query: language, kind, fact, rank of the gold message (None: not listed),
    total results told, seconds."""
    loaded = []
    for number, agent in enumerate(agents):
        async with sessions() as session, session.begin():
            loaded.append(await load_agent(session, agent, number))
    if embedder is not None:
        cpu = time.process_time()
        embedded = await embed_missing(sessions, embedder)
        COST["ms CPU per message"] = 1000 * (time.process_time() - cpu) / max(1, embedded)
        COST["messages"] = embedded
    rows = []
    for agent, (scope, ids) in zip(agents, loaded, strict=True):
        async with sessions() as session:
            ctx = ToolContext(
                AgentStore(session, scope, EngineConfig().max_message_tokens),
                {},
                EngineConfig(page_size=max(ks)),
                datetime.now(UTC),
                embedder=embedder,
                member_name=agent.member,
                agent_name="Companion",
            )
            for query in agent.queries:
                start = time.perf_counter()
                page, _ = await find_messages(ctx, query.text, 1)
                seconds = time.perf_counter() - start
                found = [hit.id for hit in page.hits]
                gold = ids[query.gold]
                rows.append(
                    {
                        "language": agent.language,
                        "kind": query.kind,
                        "fact": query.fact,
                        "rank": found.index(gold) + 1 if gold in found else None,
                        "total": page.total,
                        "seconds": seconds,
                    }
                )
    return rows


def recall(rows: list[dict[str, object]], k: int) -> str:
    hits = [r["rank"] is not None and r["rank"] <= k for r in rows]  # type: ignore[operator]
    return f"{100 * statistics.fmean(hits):.1f}" if hits else "-"


def summary(rows: list[dict[str, object]], ks: list[int], by: str) -> list[list[object]]:
    groups: dict[str, list[dict[str, object]]] = defaultdict(list)
    for row in rows:
        groups[str(row[by])].append(row)
    out: list[list[object]] = []
    for name, group in groups.items():
        totals = [int(r["total"]) for r in group]  # type: ignore[call-overload]
        out.append(
            [
                name,
                len(group),
                *(recall(group, k) for k in ks),
                f"{statistics.median(totals):.0f}",
                sum(1 for t in totals if t == 0),
            ]
        )
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", help="use this Postgres (a throwaway schema in it)")
    parser.add_argument(
        "--embedder",
        default="local",
        help="none, local (MiniLM) or multilingual (multilingual-e5-small, the extra)",
    )
    parser.add_argument("--agents", type=int, default=10, help="members per language")
    parser.add_argument("--k", default="1,5,10", help="cut-offs, comma-separated")
    parser.add_argument("--languages", default=",".join(LANGUAGES), help="comma-separated")
    args = parser.parse_args()
    ks = sorted(int(k) for k in args.k.split(","))
    languages = tuple(args.languages.split(","))
    agents = build(args.agents, languages=languages)
    host = machine()
    embedder = embedder_named(args.embedder)
    dim = getattr(embedder, "dimension", 384)
    start = time.perf_counter()
    async with bench_database(args.database_url, embedding_dim=dim, pool_size=2) as db:
        sessions = async_sessionmaker(db.engine, expire_on_commit=False)
        rows = await measure(sessions, agents, embedder, ks)
        async with sessions() as session:
            held = await session.scalar(text("SELECT count(*) FROM messages"))
        version = await server_version(db.engine)
    seconds = time.perf_counter() - start
    print(
        settings_block(
            "Settings",
            {
                "set": f"bench/multilingual_set.py, {args.agents} members per language, "
                f"{held} messages, {len(rows)} queries",
                "database": f"{db.where} ({version})",
                "machine": host,
                "code": revision(),
                "search": f"core.memory.tools.find_messages(query, page 1), page_size {max(ks)}",
                "embedder": f"{args.embedder} ({getattr(embedder, 'model', 'key words only')})",
                "time": f"{seconds:.0f} s in all, loading and embedding included",
                "cost": (
                    f"{COST['ms CPU per message']:.1f} ms CPU per embedded message "
                    f"({COST['messages']:.0f} messages, the whole catch-up pass, one thread)"
                    if COST
                    else "no embedding"
                ),
            },
        )
    )
    headers = ["group", "queries", *(f"R@{k} %" for k in ks), "median results", "none found"]
    print("\nBy language (en: the English subset)")
    print(table(headers, summary(rows, ks, "language")))
    print("\nBy kind of query, all languages")
    print(table(headers, summary(rows, ks, "kind")))
    for language in languages:
        print(f"\n{language}, by kind")
        subset = [r for r in rows if r["language"] == language]
        print(table(headers, summary(subset, ks, "kind")))
    latency = sorted(float(r["seconds"]) for r in rows)  # type: ignore[arg-type]
    print(
        f"\nconversation_search latency: median {1000 * statistics.median(latency):.1f} ms, "
        f"p95 {1000 * latency[int(0.95 * (len(latency) - 1))]:.1f} ms"
    )


if __name__ == "__main__":
    asyncio.run(main())
