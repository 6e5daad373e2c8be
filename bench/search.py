"""Recall and archival search latency on a large agent (100k rows by default).

    python bench/search.py [--rows 100000] [--other-rows N] [--dim 1536] [--queries 50]

Loads, for one agent, --rows messages (generated English chat lines spread over --days) and
--rows archival passages, both with random unit vectors of --dim dimensions; other agents get
--other-rows of each between them (as many again by default), so every query has to filter
to its agent. Then times
the product's own search functions (`core.memory.search`): `recall_search` with
natural-language questions and a query vector (full text and HNSW fused, the turns next to
the best hits ranked too), the same with a day named (its messages ranked once more, one
statement more), the same by key words only, `recall_by_date` over 1-7 day ranges,
`archival_search` with words and a vector, with a vector alone (EXPLAIN shows whether
`passage_vectors_embedding` is used) and by key words (embedding=None). Pages 1 and 3,
--page-size results each, after --warmup other queries of the same kind (untimed: a fresh
index is not yet in the buffer cache, an agent's index in use is). The query vector is
given: the time to embed a query (about 2-15 ms with the local model, see bench/README.md)
is not included.

Hostile queries at the caps a member can reach (--hostile-queries of each, after a few
untimed, pages 1 and --deep-page; --cjk-share of the messages written in 100 ideographs,
whose bigrams the CJK query asks for): what `conversation_search` and `archival_search` run with
1,000 characters (`core.memory.tools.MAX_QUERY_CHARS`) of distinct words of the messages'
own vocabulary, of CJK characters (a bigram each), and of one word repeated; and the web
inspector's search (key words only) with 200 characters of distinct words; and the
QUERY_LEXEMES words most messages hold (the dearest query once a query is weighed by that
many words).

Bulk load: the secondary indexes of messages, passages and their vector tables are dropped;
messages go in with COPY (text), their words are listed and counted into message_words and
message_terms (core.memory.terms.REBUILD_ALL), their vectors (into message_vectors) and the
passages with theirs (passage_vectors) go in with one INSERT ... SELECT each (vectors made
by the server), the passages'
words into passage_words and passage_terms (core.memory.terms.LIST_PASSAGES,
COUNT_PASSAGES); then the same indexes are rebuilt from their saved definitions and timed,
and the tables vacuumed and checkpointed (so that the first searches do not run while the
load's new pages are written out).
The HNSW build takes minutes at 1536 dimensions on 2 cores; --dim 384 is a quicker run.
At the end, EXPLAIN ANALYZE of every statement one recall_search (words + embedding, a day
named) sends: where its time goes. Needs PostgreSQL 16+ (random_normal) and pgvector 0.8+.

Every search runs as a turn runs it: as the role Companion connects as (`companion_app` on
the embedded server), inside the member's wall (`enter_scope`), where row-level security
decides which indexes Postgres may use. Prints numbers only; no assertions. Starts an
embedded Postgres in a temporary directory unless --database-url is given (then it works in
a throwaway schema).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncpg
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bench.common import (
    ACTIVITIES,
    ADJECTIVES,
    FEELINGS,
    NAMES,
    PEOPLE,
    PLACES,
    THINGS,
    Database,
    bench_database,
    chat_line,
    machine,
    question,
    revision,
    server_version,
    settings_block,
    stats_ms,
    table,
)
from core.config import EngineConfig
from core.directory import ensure_agent
from core.memory.dates import Days
from core.memory.keywords import QUERY_LEXEMES
from core.memory.search import Page, archival_search, recall_by_date, recall_search
from core.memory.terms import COUNT_PASSAGES, LIST_PASSAGES, REBUILD_ALL
from core.memory.tools import MAX_QUERY_CHARS
from core.scope import Scope, enter_scope

T0 = datetime(2024, 1, 1, 8, 0, tzinfo=UTC)
MESSAGE_COLUMNS = [
    "tenant_id",
    "agent_id",
    "role",
    "content",
    "search_text",
    "tokens",
    "in_context",
    "created_at",
]


def log(text: str) -> None:
    print(f"  .. {text}", file=sys.stderr, flush=True)


class Stopwatch:
    def __init__(self) -> None:
        self.laps: list[tuple[str, float]] = []

    async def time(self, label: str, work: Awaitable[Any]) -> Any:
        log(f"{label} ...")
        start = time.perf_counter()
        result = await work
        self.laps.append((label, time.perf_counter() - start))
        return result


# ---------------------------------------------------------------- loading


def spread(n: int, agents: list[Scope]) -> list[Scope]:
    """The owner of each of n rows, spread evenly over `agents`."""
    return [agents[i % len(agents)] for i in range(n)]


# A CJK message is written from these characters, so its bigrams repeat as a language's do.
HAN = "".join(chr(0x4E00 + i) for i in range(0, 2000, 20))


def cjk_line(rng: random.Random) -> str:
    return "".join(rng.choice(HAN) for _ in range(rng.randrange(10, 60)))


def message_records(
    owners: list[Scope], days: int, seed: int, cjk_share: float = 0.0
) -> list[tuple]:
    rng = random.Random(seed)
    step = days * 86400 / max(len(owners), 1)
    records = []
    for i, owner in enumerate(owners):
        line = cjk_line(rng) if cjk_share and rng.random() < cjk_share else chat_line(rng)
        role = "user" if i % 2 == 0 else "assistant"
        when = T0 + timedelta(seconds=i * step)
        records.append((owner.tenant_id, owner.agent_id, role, line, line, 0, False, when))
    return records


async def drop_indexes(raw: asyncpg.Connection, tables: list[str]) -> list[tuple[str, str]]:
    """Drop the secondary indexes of `tables`; returns (name, definition) to rebuild them."""
    rows = await raw.fetch(
        """
        SELECT i.indexname, i.indexdef FROM pg_indexes i
        JOIN pg_class c ON c.relname = i.indexname
        JOIN pg_index x ON x.indexrelid = c.oid
        WHERE i.schemaname = current_schema() AND i.tablename = ANY($1::text[])
          AND NOT x.indisprimary
        """,
        tables,
    )
    for row in rows:
        await raw.execute(f'DROP INDEX "{row["indexname"]}"')
    return [(row["indexname"], row["indexdef"]) for row in rows]


async def load(
    db: Database, target: Scope, others: list[Scope], args: argparse.Namespace, watch: Stopwatch
) -> list[tuple[str, str]]:
    raw = await db.raw()
    try:
        await raw.execute(f"SET maintenance_work_mem = '{args.maintenance_work_mem}'")
        saved = await drop_indexes(
            raw, ["messages", "message_vectors", "passages", "passage_vectors"]
        )
        owners = [target] * args.rows + spread(args.other_rows, others)
        records = message_records(owners, args.days, args.seed, args.cjk_share)
        await watch.time(
            f"COPY {len(records):,} messages",
            raw.copy_records_to_table("messages", records=records, columns=MESSAGE_COLUMNS),
        )
        await watch.time(
            f"list and count the words of {len(records):,} messages (message_words, _terms)",
            raw.execute(";".join(statement.format(where="") for statement in REBUILD_ALL)),
        )
        rng = random.Random(args.seed)
        step = args.days * 86400 / args.rows
        staging = [
            (
                i,
                o.tenant_id,
                o.agent_id,
                " ".join(chat_line(rng) for _ in range(2)),
                T0 + timedelta(seconds=(i % args.rows) * step),
            )
            for i, o in enumerate(owners)
        ]
        await raw.execute(
            "CREATE TEMP TABLE staging (n int, tenant_id bigint, agent_id bigint, text text, "
            "created_at timestamptz)"
        )
        await raw.copy_records_to_table("staging", records=staging)
        await raw.execute("SELECT setseed($1)", (args.seed % 1000) / 1000)
        await watch.time(
            f"INSERT {len(records):,} message_vectors, random unit vectors ({args.dim} dims)",
            raw.execute(
                """
                INSERT INTO message_vectors (tenant_id, agent_id, message_id, embedding)
                SELECT m.tenant_id, m.agent_id, m.id, l2_normalize(ARRAY(
                    SELECT random_normal() FROM generate_series(1, $1) WHERE m.id >= 0
                )::vector)::halfvec
                FROM messages m ORDER BY m.id
                """,
                args.dim,
            ),
        )
        await watch.time(
            f"INSERT {len(staging):,} passages and their random unit vectors ({args.dim} dims)",
            raw.execute(
                """
                WITH added AS (
                    INSERT INTO passages (tenant_id, agent_id, text, source, created_at)
                    SELECT s.tenant_id, s.agent_id, s.text, 'bench', s.created_at
                    FROM staging s ORDER BY s.n
                    RETURNING tenant_id, agent_id, id
                )
                INSERT INTO passage_vectors (tenant_id, agent_id, passage_id, embedding)
                SELECT a.tenant_id, a.agent_id, a.id, l2_normalize(ARRAY(
                    SELECT random_normal() FROM generate_series(1, $1) WHERE a.id >= 0
                )::vector)::halfvec
                FROM added a ORDER BY a.id
                """,
                args.dim,
            ),
        )
        await watch.time(
            f"list and count the words of {len(staging):,} passages (passage_words, _terms)",
            raw.execute(";".join(sql.format(where="") for sql in (LIST_PASSAGES, COUNT_PASSAGES))),
        )
        for name, definition in saved:
            await watch.time(f"CREATE INDEX {name}", raw.execute(definition))
        tables = (
            "messages, message_vectors, message_terms, message_words, passages, passage_vectors, "
            "passage_words, passage_terms"
        )
        vacuum = f"VACUUM ANALYZE {tables}"
        await watch.time(vacuum, raw.execute(vacuum))
        # The load's gigabyte of new pages written out now, not while the first searches run.
        try:
            await watch.time("CHECKPOINT", raw.execute("CHECKPOINT"))
        except asyncpg.InsufficientPrivilegeError:
            log("CHECKPOINT needs a superuser or pg_checkpoint: the first searches may be slower")
    finally:
        await raw.close()
    return saved


# ---------------------------------------------------------------- querying

Search = Callable[[AsyncSession, int], Awaitable[Page]]

WEB_QUERY_CHARS = 200  # bot/web/member.py cuts the inspector's search to this
VOCABULARY = sorted(
    {
        word.lower()
        for words in (PEOPLE, NAMES, ACTIVITIES, THINGS, FEELINGS, ADJECTIVES, PLACES)
        for phrase in words
        for word in phrase.split()
        if word != "the"
    }
)


def distinct_words(rng: random.Random, chars: int) -> str:
    """Distinct words of the messages' vocabulary, shuffled, up to `chars` characters."""
    words = VOCABULARY[:]
    rng.shuffle(words)
    query = ""
    for word in words:
        if len(query) + len(word) + 1 > chars:
            break
        query = f"{query} {word}" if query else word
    return query


def cjk(rng: random.Random, chars: int) -> str:
    """`chars` ideographs of the CJK messages' (`HAN`): a bigram each to look up."""
    return "".join(rng.choice(HAN) for _ in range(chars))


def one_word(rng: random.Random, chars: int) -> str:
    word = rng.choice(THINGS)
    return " ".join([word] * ((chars + 1) // (len(word) + 1)))


async def commonest_words(session: AsyncSession, scope: Scope, n: int) -> str:
    """The `n` words most of the agent's messages hold (as stored: stems, which read back as
    themselves): the dearest query a cap on the number of words leaves."""
    rows = await session.execute(
        text(
            "SELECT lexeme FROM message_terms WHERE tenant_id = :tenant AND agent_id = :agent "
            "AND lexeme ~ '^[a-z]+$' ORDER BY messages DESC LIMIT :n"
        ),
        {"tenant": scope.tenant_id, "agent": scope.agent_id, "n": n},
    )
    return " ".join(rows.scalars())


async def timed_queries(
    sessions: async_sessionmaker[AsyncSession],
    scope: Scope,
    searches: list[Search],
    warmup: int,
    pages: tuple[int, int] = (1, 3),
) -> dict[int, tuple[list[float], list[int]]]:
    """Run every search at `pages`, each in its own transaction inside the member's
    wall (as a turn runs them); seconds and totals of all but the first `warmup` searches,
    which warm the caches as an agent's earlier searches would."""
    results: dict[int, tuple[list[float], list[int]]] = {page: ([], []) for page in pages}
    for i, search in enumerate(searches):
        for page in pages:
            async with sessions() as session, session.begin():
                await enter_scope(session, scope)
                start = time.perf_counter()
                found = await search(session, page)
                took = time.perf_counter() - start
            if i >= warmup:
                results[page][0].append(took)
                results[page][1].append(found.total)
    return results


class Capture:
    """Keeps the SQL statements (with parameters) that contain `marker`, in order."""

    def __init__(self, db: Database, marker: str = "") -> None:
        self.marker = marker
        self.statements: list[tuple[str, Any]] = []
        event.listen(db.engine.sync_engine, "before_cursor_execute", self._seen)

    @property
    def statement(self) -> tuple[str, Any] | None:
        return self.statements[-1] if self.statements else None

    def _seen(self, _conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        skipped = statement.lstrip().startswith(("EXPLAIN", "SET"))
        skipped = skipped or "companion_enter" in statement
        if self.marker in statement and not skipped:
            self.statements.append((statement, parameters))


async def explain(session: AsyncSession, captured: tuple[str, Any]) -> list[str]:
    statement, parameters = captured
    conn = await session.connection()
    result = await conn.exec_driver_sql("EXPLAIN (ANALYZE, COSTS OFF) " + statement, parameters)
    return [row[0] for row in result.all()]


def unit_vector(rng: random.Random, dim: int) -> list[float]:
    vector = [rng.gauss(0.0, 1.0) for _ in range(dim)]
    norm = sum(v * v for v in vector) ** 0.5
    return [v / norm for v in vector]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", help="use this Postgres (a throwaway schema in it)")
    parser.add_argument("--rows", type=int, default=100_000, help="messages and passages")
    parser.add_argument("--other-agents", type=int, default=99, help="agents sharing the rest")
    parser.add_argument("--other-rows", type=int, help="their messages and passages (--rows)")
    parser.add_argument("--dim", type=int, default=1536, help="embedding dimension")
    parser.add_argument("--queries", type=int, default=50, help="timed queries per kind")
    parser.add_argument("--warmup", type=int, default=50, help="other queries first, untimed")
    parser.add_argument("--page-size", type=int, default=EngineConfig().page_size)
    parser.add_argument("--days", type=int, default=730, help="time span of the messages")
    parser.add_argument("--maintenance-work-mem", default="2GB", help="for the index builds")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--cjk-share", type=float, default=0.0, help="messages in CJK")
    parser.add_argument("--hostile-queries", type=int, default=10, help="timed, per kind")
    parser.add_argument("--deep-page", type=int, default=20, help="the hostile kinds' 2nd page")
    parser.add_argument("--hostile-only", action="store_true", help="skip the normal kinds")
    args = parser.parse_args()
    args.other_rows = args.rows if args.other_rows is None else args.other_rows
    if args.dim >= 1000:
        log(
            f"building an HNSW index over {args.rows + args.other_rows:,} vectors of "
            f"{args.dim} dimensions takes minutes on 2 cores; --dim 384 is quicker"
        )

    async with bench_database(args.database_url, embedding_dim=args.dim, pool_size=2) as db:
        sessions = async_sessionmaker(db.engine, expire_on_commit=False)
        async with sessions() as session, session.begin():
            config = EngineConfig()
            target = await ensure_agent(session, "bench", "target", config)
            others = [
                await ensure_agent(session, "bench", f"other-{i}", config)
                for i in range(args.other_agents)
            ]
        host = machine()
        watch = Stopwatch()
        await load(db, target, others, args, watch)

        rng = random.Random(args.seed)
        size = args.page_size
        count = args.warmup + args.queries
        questions = [question(rng) for _ in range(count)]
        ranges = []
        for _ in range(count):
            start = T0.date() + timedelta(days=rng.randrange(args.days))
            ranges.append((start, start + timedelta(days=rng.randrange(7))))
        vectors = [unit_vector(rng, args.dim) for _ in range(count)]

        def recall(q: str) -> Search:
            return lambda s, page: recall_search(s, target, q, page, size)

        def hybrid_recall(q: str, v: list[float]) -> Search:
            return lambda s, page: recall_search(s, target, q, page, size, None, v)

        def on_a_day(q: str, v: list[float], r: tuple[date, date]) -> Search:
            days = Days(r[0] - timedelta(days=1), r[0] + timedelta(days=1))  # as named
            return lambda s, page: recall_search(
                s, target, q, page, size, None, v, None, None, days
            )

        def hybrid_archival(q: str, v: list[float]) -> Search:
            return lambda s, page: archival_search(s, target, q, v, page, size)

        def by_date(r: tuple[date, date]) -> Search:
            return lambda s, page: recall_by_date(s, target, r[0], r[1], "UTC", page, size)

        def nearest(v: list[float]) -> Search:
            return lambda s, page: archival_search(s, target, "", v, page, size)

        def keywords(q: str) -> Search:
            return lambda s, page: archival_search(s, target, q, None, page, size)

        pairs = list(zip(questions, vectors, strict=True))
        kinds = [
            ("recall_search (words + embedding)", [hybrid_recall(q, v) for q, v in pairs]),
            (
                "recall_search (words + embedding, a day named)",
                [on_a_day(q, v, r) for (q, v), r in zip(pairs, ranges, strict=True)],
            ),
            ("recall_search (key words only)", [recall(q) for q in questions]),
            ("recall_by_date (1-7 days)", [by_date(r) for r in ranges]),
            ("archival_search (words + embedding)", [hybrid_archival(q, v) for q, v in pairs]),
            ("archival_search (embedding, no words)", [nearest(v) for v in vectors]),
            ("archival_search (key words only)", [keywords(q) for q in questions]),
        ]
        hostile_warmup = 3
        many = hostile_warmup + args.hostile_queries
        hostile_vectors = [unit_vector(rng, args.dim) for _ in range(many)]
        long_words = [distinct_words(rng, MAX_QUERY_CHARS) for _ in range(many)]
        long_cjk = [cjk(rng, MAX_QUERY_CHARS) for _ in range(many)]
        repeated = [one_word(rng, MAX_QUERY_CHARS) for _ in range(many)]
        web = [distinct_words(rng, WEB_QUERY_CHARS) for _ in range(many)]
        async with sessions() as session:
            commonest = await commonest_words(session, target, QUERY_LEXEMES)
        hostile = [
            (
                f"recall_search (words + embedding), {MAX_QUERY_CHARS:,} chars of distinct words",
                [hybrid_recall(q, v) for q, v in zip(long_words, hostile_vectors, strict=True)],
            ),
            (
                f"recall_search (words + embedding), {MAX_QUERY_CHARS:,} CJK characters",
                [hybrid_recall(q, v) for q, v in zip(long_cjk, hostile_vectors, strict=True)],
            ),
            (
                f"recall_search (words + embedding), {MAX_QUERY_CHARS:,} chars of one word",
                [hybrid_recall(q, v) for q, v in zip(repeated, hostile_vectors, strict=True)],
            ),
            (
                f"recall_search (words + embedding), the {QUERY_LEXEMES} commonest words",
                [hybrid_recall(commonest, v) for v in hostile_vectors],
            ),
            (
                f"recall_search (key words only), {WEB_QUERY_CHARS} chars (the web inspector)",
                [recall(q) for q in web],
            ),
            (
                f"recall_search (key words only), {MAX_QUERY_CHARS:,} chars of distinct words",
                [recall(q) for q in long_words],
            ),
            (
                f"archival_search (words + embedding), {MAX_QUERY_CHARS:,} chars of distinct words",
                [hybrid_archival(q, v) for q, v in zip(long_words, hostile_vectors, strict=True)],
            ),
        ]
        timed = [(label, searches, args.warmup, (1, 3)) for label, searches in kinds]
        if args.hostile_only:
            timed = [timed[0], timed[2], timed[4]]  # the normal queries to compare with
        timed += [
            (label, searches, hostile_warmup, (1, args.deep_page)) for label, searches in hostile
        ]
        rows = []
        for label, searches, warmup, pages in timed:
            log(f"timing {label}")
            results = await timed_queries(sessions, target, searches, warmup, pages)
            for page in pages:
                seconds, totals = results[page]
                s = stats_ms(seconds)
                rows.append(
                    [
                        label,
                        page,
                        len(seconds),
                        s["median"],
                        s["p95"],
                        s["mean"],
                        int(statistics.median(totals)),
                    ]
                )

        vector_sql = Capture(db, "<=>")
        async with sessions() as session, session.begin():
            await enter_scope(session, target)
            await archival_search(session, target, "", vectors[0], 1, size)
            assert vector_sql.statement is not None
            vector_plan = await explain(session, vector_sql.statement)
        hybrid_sql = Capture(db)
        async with sessions() as session, session.begin():
            await enter_scope(session, target)
            named = Days(ranges[1][0], ranges[1][0])  # a day named: its statement shows too
            await recall_search(
                session, target, questions[1], 1, size, None, vectors[1], None, None, named
            )
            hybrid_plans = [await explain(session, sql) for sql in hybrid_sql.statements]
            buffers = await session.scalar(text("SHOW shared_buffers"))

        print(
            settings_block(
                "Settings",
                {
                    "database": f"{db.where} ({await server_version(db.engine)})",
                    "machine": host,
                    "code": revision(),
                    "target agent": f"{args.rows:,} messages, {args.rows:,} passages",
                    "other agents": f"{args.other_agents}, sharing {args.other_rows:,} messages "
                    f"and {args.other_rows:,} passages",
                    "messages": f"1-3 generated English sentences ({args.cjk_share:.0%} "
                    f"in CJK), over {args.days} days",
                    "passages": f"2-6 sentences; random unit vectors, {args.dim} dimensions",
                    "queries": f"{args.queries} per kind (after {args.warmup} others, "
                    f"untimed), pages 1 and 3, page_size {size}, one transaction each, "
                    "inside the member's wall",
                    "index builds": f"maintenance_work_mem {args.maintenance_work_mem}",
                    "buffer cache": f"shared_buffers {buffers}",
                    "timer": "time.perf_counter around the core.memory.search call",
                },
            )
        )
        print("\nLoad and index build")
        print(table(["step", "seconds"], [[label, secs] for label, secs in watch.laps]))
        print("\nSearch latency (ms)")
        print(table(["search", "page", "queries", "median", "p95", "mean", "median total"], rows))

        used = any("passage_vectors_embedding" in line for line in vector_plan)
        print(
            f"\nEXPLAIN ANALYZE of archival_search (embedding), page 1: HNSW index "
            f"passage_vectors_embedding {'USED' if used else 'NOT used'}"
        )
        for line in vector_plan:
            print("    " + re.sub(r"'\[[^\]]{60,}\]'", f"'[{args.dim} numbers]'", line))
        print(
            "\nEXPLAIN ANALYZE of each statement of one recall_search (words + embedding), "
            "page 1, in order:"
        )
        for plan in hybrid_plans:
            top = re.sub(r"\s+\(.*", "", plan[0].strip())
            indexes = sorted(
                {
                    w.strip(",")
                    for line in plan
                    for w in line.replace("(", " ").split()
                    if w.startswith(("messages_", "message_"))
                }
            )
            print(f"    {plan[-1].strip():26} {top}; indexes: {', '.join(indexes) or 'none'}")


if __name__ == "__main__":
    asyncio.run(main())
