"""Evidence recall of `conversation_search` on LoCoMo, through the product's own search.

    python bench/locomo_recall.py [--data ../shared/data/locomo/locomo_dev.json] [--k 5,10,25]
                                  [--embedder local|multilingual|none|local-float|local-mixed]
                                  [--conversations 0-4]

For each LoCoMo conversation: one agent, whose member is speaker_a (the display name) and
whose persona says "I am <speaker_b>"; every turn of every session becomes a message
(speaker_a as "user", speaker_b as "assistant"; search_text is the turn's text, plus
"[shares a photo: <blip_caption>]" when the turn shares an image; created_at from the
session's date, turns a minute apart). The messages get their vectors from the product's
own catch-up pass (`core.memory.embeddings.embed_missing`) with the chosen embedder. Then,
for every question with evidence, the question goes to what `conversation_search` runs
(`core.memory.tools.find_messages`: the names left out, the query embedded, full text and
vectors fused) with page_size=k, and

    evidence recall@k = |gold dialogue ids among the top k| / |gold dialogue ids|

is averaged over questions, overall and per category; hit@k is the share of questions with
at least one gold turn in the top k. Malformed evidence ids ("D8:6; D9:17", "D:11:26") are
repaired when possible; what cannot be used is counted and reported.

For comparison the script also ranks the same turns with textbook Okapi BM25 (k1=1.2,
b=0.75) over the same Postgres 'english' lexemes, computed here in Python: a reference
row, not product code. Published floor on LoCoMo (paper, Table 3, full set): BM25 over
turns R@5 ~52, R@10 ~59; DRAGON R@5 56.7, R@10 66.2.

The data is LoCoMo (Maharana et al., 2024), licensed CC BY-NC 4.0: it is read from --data
for evaluation only and never copied into this repository.

Prints numbers only; no assertions. Starts an embedded Postgres in a temporary directory
unless --database-url is given (then it works in a throwaway schema).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import pickle
import statistics
import sys
import time
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

import core.memory.ranking as ranking
from bench.common import (
    ROOT,
    bench_database,
    machine,
    revision,
    server_version,
    settings_block,
    stats_ms,
    table,
)
from bot.eval.locomo import (
    CATEGORIES,
    EvidenceLog,
    import_conversation,
    parse_evidence,
    persona_of,
    read_samples,
)
from core.config import EngineConfig
from core.local_embedder import LocalEmbedder
from core.memory.dates import days_named
from core.memory.embeddings import closeness_of, embed_missing, query_vector
from core.memory.ranking import agent_name
from core.memory.store import AgentStore
from core.memory.tools import ToolContext, find_messages
from core.multilingual_embedder import MultilingualEmbedder, package_dir
from core.ports import Embedder
from core.scope import Scope

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo" / "locomo_dev.json"


PAGE_SIZES = (3, 5, 8, 10)  # pages read at other sizes than the product's (EngineConfig)
QUERY_KEY = "\x00query\x00"  # a query's vector, kept apart from a stored text's


def try_constant(setting: str) -> None:
    """NAME=VALUE: a ranking constant changed for this run, where search reads it too."""
    import core.memory.search as search

    name, raw = setting.split("=", 1)
    old = getattr(ranking, name)
    value = tuple(float(x) for x in raw.split(",")) if isinstance(old, tuple) else type(old)(raw)
    for module in (ranking, search):
        if hasattr(module, name):
            setattr(module, name, value)


def embedder_named(name: str) -> Embedder:
    """What COMPANION_EMBEDDING_MODEL gives in process: `local` (unset: all-MiniLM-L6-v2)
    or `multilingual` (multilingual-e5-small, the extra companion[multilingual]); and, to
    compare, `local-float`: the same model in the published file's float arithmetic (what
    Companion ran before its int8 arithmetic), `local-mixed`: a deployment upgraded from it."""
    if name == "multilingual":
        package_dir()  # not installed: one line saying how
        return MultilingualEmbedder()
    if name == "local-float":
        return LocalEmbedder(int8=False)
    if name == "local-mixed":
        return HalfFloat()
    return LocalEmbedder()


class HalfFloat:
    """Half the turns (by a hash of their text) embedded in float arithmetic, the others and
    every query in int8: a database that was half embedded before the upgrade."""

    dimension = LocalEmbedder.dimension

    def __init__(self) -> None:
        self.float, self.int8 = LocalEmbedder(int8=False), LocalEmbedder()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        old = [t for t in texts if zlib.crc32(t.encode()) % 2]
        vectors = dict(zip(old, await self.float.embed(old), strict=True))
        new = [t for t in texts if t not in vectors]
        vectors.update(zip(new, await self.int8.embed(new), strict=True))
        return [vectors[t] for t in texts]

    async def embed_query(self, text: str) -> list[float]:
        return (await self.int8.embed([text]))[0]


class CachedEmbedder:
    """An embedder that remembers vectors by text, optionally in a file kept outside the repo
    (vectors of LoCoMo turns are derived from CC BY-NC data: never commit them)."""

    def __init__(self, inner: Embedder, path: Path | None) -> None:
        self.inner, self.path = inner, path
        self.vectors: dict[str, list[float]] = {}
        if path and path.exists():
            self.vectors = pickle.loads(path.read_bytes())
        self.seconds, self.cpu, self.computed = 0.0, 0.0, 0
        self.closeness = closeness_of(inner)  # the model's own cut, unless --closeness

    async def embed(self, texts: list[str]) -> list[list[float]]:
        missing = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        if missing:
            start, cpu = time.perf_counter(), time.process_time()
            for t, v in zip(missing, await self.inner.embed(missing), strict=True):
                self.vectors[t] = v
            self.seconds += time.perf_counter() - start
            self.cpu += time.process_time() - cpu
            self.computed += len(missing)
        return [self.vectors[t] for t in texts]

    async def embed_query(self, text: str) -> list[float]:
        """A search's vector, in the query form where the model has one (e5)."""
        key = QUERY_KEY + text
        if key not in self.vectors:
            self.vectors[key] = await query_vector(self.inner, text)
        return self.vectors[key]

    def save(self) -> None:
        if self.path:
            self.path.write_bytes(pickle.dumps(self.vectors))


def names_of(sample: dict[str, Any]) -> dict[str, str | None]:
    """The names conversation_search knows: the member's, and the one the persona gives."""
    conversation = sample["conversation"]
    persona = persona_of(conversation)
    return {"member_name": conversation["speaker_a"], "agent_name": agent_name(persona)}


# ---------------------------------------------------------------- reference BM25


class BM25:
    """Okapi BM25 over one agent's messages, on Postgres 'english' lexemes."""

    def __init__(self, docs: dict[int, Counter[str]], k1: float = 1.2, b: float = 0.75):
        self.docs, self.k1, self.b = docs, k1, b
        self.lengths = {i: sum(tf.values()) for i, tf in docs.items()}
        self.avg = statistics.fmean(self.lengths.values()) or 1.0
        df = Counter(term for tf in docs.values() for term in tf)
        n = len(docs)
        self.idf = {t: math.log(1 + (n - c + 0.5) / (c + 0.5)) for t, c in df.items()}

    def rank(self, terms: set[str], k: int) -> list[int]:
        scores: dict[int, float] = {}
        for i, tf in self.docs.items():
            score = 0.0
            for term in terms & tf.keys():
                f = tf[term]
                norm = f + self.k1 * (1 - self.b + self.b * self.lengths[i] / self.avg)
                score += self.idf[term] * f * (self.k1 + 1) / norm
            if score > 0:
                scores[i] = score
        return sorted(scores, key=lambda i: (-scores[i], -i))[:k]


async def lexemes_of_messages(session: AsyncSession, scope: Scope) -> dict[int, Counter[str]]:
    rows = await session.execute(
        text(
            "SELECT m.id, l.lexeme, coalesce(array_length(l.positions, 1), 1) AS n "
            "FROM messages m, unnest(to_tsvector('english', m.search_text)) AS l "
            "WHERE m.tenant_id = :t AND m.agent_id = :a"
        ),
        {"t": scope.tenant_id, "a": scope.agent_id},
    )
    docs: dict[int, Counter[str]] = defaultdict(Counter)
    for message_id, lexeme, n in rows.all():
        docs[message_id][lexeme] += n
    return docs


async def lexemes_of(session: AsyncSession, words: str) -> set[str]:
    found = await session.scalar(
        text("SELECT tsvector_to_array(to_tsvector('english', :q))"), {"q": words}
    )
    return set(found or ())


# ---------------------------------------------------------------- scoring


def pages_at(size: int, results: int, found: list[str], gold: set[str]) -> tuple[int, int]:
    """Pages the model is told of, and those it reads paging on until the first evidence
    turn (all of them when `found`, the first results, holds none)."""
    pages = max(1, math.ceil(results / size))
    first = next((rank for rank, turn in enumerate(found) if turn in gold), None)
    return pages, pages if first is None else first // size + 1


@dataclass
class Scores:
    """Per question: category, and recall and hit at each k."""

    rows: list[tuple[int, dict[int, float], dict[int, bool]]] = field(default_factory=list)

    def add(self, category: int, gold: set[str], ranked: dict[int, list[str]]) -> None:
        recall = {k: len(gold & set(ids)) / len(gold) for k, ids in ranked.items()}
        hit = {k: bool(gold & set(ids)) for k, ids in ranked.items()}
        self.rows.append((category, recall, hit))

    def summary(self, ks: list[int]) -> list[list[object]]:
        groups: list[tuple[str, list]] = [("all", self.rows)]
        groups.append(("all but 5 (adversarial)", [r for r in self.rows if r[0] != 5]))
        for category, name in CATEGORIES.items():
            groups.append((f"{category} {name}", [r for r in self.rows if r[0] == category]))
        out = []
        for label, rows in groups:
            if not rows:
                continue
            line: list[object] = [label, len(rows)]
            line += [f"{100 * statistics.fmean(r[1][k] for r in rows):.1f}" for k in ks]
            line += [f"{100 * statistics.fmean(r[2][k] for r in rows):.1f}" for k in ks]
            out.append(line)
        return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="locomo JSON file")
    parser.add_argument("--database-url", help="use this Postgres (a throwaway schema in it)")
    parser.add_argument("--k", default="5,10,25", help="cut-offs, comma-separated")
    parser.add_argument("--conversations", help='which ones, by position: "0-4", "5,7"')
    parser.add_argument(
        "--embedder",
        choices=["local", "multilingual", "none", "local-float", "local-mixed"],
        default="local",
        help="local: all-MiniLM-L6-v2; multilingual: multilingual-e5-small; none: full text "
        "only; local-float: MiniLM in float arithmetic; local-mixed: half the turns so",
    )
    parser.add_argument("--vectors-cache", type=Path, help="reuse vectors (keep out of the repo)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="another ranking constant (core.memory.ranking), e.g. SPEAKER_WEIGHT=1.5",
    )
    parser.add_argument(
        "--closeness",
        help="FLOOR,MARGIN: the cut of vector-only hits instead of the embedder's own",
    )
    args = parser.parse_args()
    ks = sorted(int(k) for k in args.k.split(","))
    samples = read_samples(args.data, args.conversations)
    host = machine()
    embedder = (
        CachedEmbedder(embedder_named(args.embedder), args.vectors_cache)
        if args.embedder != "none"
        else None
    )

    for setting in args.set:
        try_constant(setting)
    if embedder is not None and args.closeness:
        floor, margin = (float(x) for x in args.closeness.split(","))
        embedder.closeness = ranking.Closeness(floor, margin)
    product, reference = Scores(), Scores()
    evidence = EvidenceLog()
    latency: list[float] = []
    dated: list[float] = []  # the same, for the questions that name days (core.memory.dates)
    paging: list[tuple[int, int, int]] = []  # (results, pages told, pages read) per question
    asked: list[tuple[int, list[str], set[str]]] = []  # (results, first ids, gold): other sizes
    per_conversation = []
    dim = LocalEmbedder.dimension
    async with bench_database(args.database_url, embedding_dim=dim, pool_size=2) as db:
        sessions = async_sessionmaker(db.engine, expire_on_commit=False)
        loaded = []
        for sample in samples:
            async with sessions() as session, session.begin():
                loaded.append(await import_conversation(session, sample, tenant="locomo"))
        embed_start = time.perf_counter()
        if embedder is not None:
            await embed_missing(sessions, embedder)
            embedder.save()
        embed_seconds = time.perf_counter() - embed_start
        async with db.engine.connect() as conn:  # planner statistics, as in a settled database
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(text("VACUUM ANALYZE messages"))
        for sample, (scope, dia_of) in zip(samples, loaded, strict=True):
            known = set(dia_of.values())
            print(f"  .. {sample['sample_id']}: {len(dia_of)} turns", file=sys.stderr)
            async with sessions() as session:
                bm25 = BM25(await lexemes_of_messages(session, scope))
                mine = Scores()
                ctx = ToolContext(
                    AgentStore(session, scope, EngineConfig().max_message_tokens),
                    {},
                    EngineConfig(page_size=max(ks)),
                    datetime.now(UTC),
                    embedder=embedder,
                    **names_of(sample),
                )
                for qa in sample["qa"]:
                    gold = parse_evidence(qa.get("evidence") or [], known, evidence)
                    if not gold:
                        evidence.no_evidence += 1
                        continue
                    start = time.perf_counter()
                    page, _ = await find_messages(ctx, qa["question"], 1)
                    latency.append(time.perf_counter() - start)
                    if days_named(qa["question"]) is not None:
                        dated.append(latency[-1])
                    ids = [dia_of[hit.id] for hit in page.hits]
                    if qa["category"] != 5:
                        told, read = pages_at(EngineConfig().page_size, page.total, ids, gold)
                        paging.append((page.total, told, read))
                        asked.append((page.total, ids, gold))
                    ranked = {k: ids[:k] for k in ks}
                    product.add(qa["category"], gold, ranked)
                    mine.add(qa["category"], gold, ranked)
                    top = bm25.rank(await lexemes_of(session, qa["question"]), max(ks))
                    reference.add(
                        qa["category"], gold, {k: [dia_of[i] for i in top[:k]] for k in ks}
                    )
            r5 = statistics.fmean(r[1][ks[0]] for r in mine.rows)
            per_conversation.append(
                [sample["sample_id"], len(dia_of), len(mine.rows), f"{100 * r5:.1f}"]
            )
        version = await server_version(db.engine)

    turns = sum(len(d) for _, d in loaded)
    if embedder is not None and embedder.computed:
        speed = (
            f"{embedder.computed / embedder.seconds:.0f} turns/s computed, "
            f"{1000 * embedder.cpu / embedder.computed:.1f} ms CPU a turn"
        )
    else:
        speed = "from the cache" if embedder else "none"
    print(
        settings_block(
            "Settings",
            {
                "data": f"{args.data} ({len(samples)} conversations; CC BY-NC 4.0, read only)",
                "database": f"{db.where} ({version})",
                "machine": host,
                "code": revision(),
                "messages": "one per turn; speaker_a 'user', speaker_b 'assistant'; "
                "search_text = text + [shares a photo: caption]",
                "loading": "all conversations first, then VACUUM ANALYZE messages",
                "search": f"core.memory.tools.find_messages(question, page 1) with page_size "
                f"{max(ks)}, cut at k in {ks}; fusion depth {ranking.DEPTH}, "
                f"RRF k {ranking.RRF_K}, "
                f"neighbours of the top {ranking.ANCHORS}, weights {ranking.NEIGHBOUR_WEIGHTS}, "
                f"the named speaker's messages again at {ranking.SPEAKER_WEIGHT}, those of the "
                f"days a question names at {ranking.DATE_WEIGHT} (the best "
                f"{ranking.DATE_RESULTS} of them results); vector-only "
                f"hits count from {embedder.closeness if embedder else '-'}"
                + (f"; tried: {', '.join(args.set)}" if args.set else ""),
                "embedder": f"{args.embedder} ({speed}; catch-up pass {embed_seconds:.1f} s "
                f"for {turns} turns)",
                "reference": "Okapi BM25 k1=1.2 b=0.75 on the same 'english' lexemes (Python)",
            },
        )
    )
    print("\nPer conversation (conversation_search)")
    print(table(["conversation", "turns", "questions", f"R@{ks[0]} %"], per_conversation))
    headers = ["questions", "n"] + [f"R@{k} %" for k in ks] + [f"hit@{k} %" for k in ks]
    print("\nEvidence recall of conversation_search (the product)")
    print(table(headers, product.summary(ks)))
    print("\nReference: Okapi BM25 over the same turns (not product code)")
    print(table(headers, reference.summary(ks)))
    print(
        "\nFloor to beat (LoCoMo paper, Table 3): BM25 R@5 ~52, R@10 ~59; "
        "DRAGON R@5 56.7, R@10 66.2"
    )
    print(
        f"\nEvidence ids: {evidence.entries} in all, {evidence.clean} clean, "
        f"{len(evidence.repaired)} repaired, {len(evidence.unparseable)} unparseable "
        f"(skipped), {len(evidence.unknown)} naming no turn in the conversation (skipped); "
        f"{evidence.no_evidence} questions without usable evidence left out"
    )
    for note in evidence.repaired:
        print(f"  repaired: {note}")
    for entry in evidence.unparseable:
        print(f"  unparseable: {entry!r}")
    for dia_id in evidence.unknown:
        print(f"  no such turn: {dia_id}")
    if paging:
        print(
            f"\nResults per question (all but adversarial): median "
            f"{statistics.median(r for r, _, _ in paging):g}; at "
            f"{EngineConfig().page_size} a page, pages told "
            f"{statistics.fmean(t for _, t, _ in paging):.2f} and read "
            f"{statistics.fmean(r for _, _, r in paging):.2f} on average (read: up to the page "
            f"holding the first evidence turn, or every page when none of the first "
            f"{max(ks)} holds one)"
        )
    if asked:
        rows = []
        for size in PAGE_SIZES:
            told, read = zip(*(pages_at(size, n, ids, gold) for n, ids, gold in asked), strict=True)
            rows.append([size, f"{statistics.fmean(told):.2f}", f"{statistics.fmean(read):.2f}"])
        print("\nPages by page size (all but adversarial; the same ranking, read as above)")
        print(table(["page size", "pages told", "pages read"], rows))
        rows = []
        for cap in (10, 15, 20, 25):
            size = EngineConfig().page_size
            told, read = zip(
                *(pages_at(size, min(n, cap), ids[:cap], gold) for n, ids, gold in asked),
                strict=True,
            )
            rows.append([cap, f"{statistics.fmean(told):.2f}", f"{statistics.fmean(read):.2f}"])
        print(f"\nPages at {EngineConfig().page_size} a page if only the best N results counted")
        print(table(["N", "pages told", "pages read"], rows))
    print(f"\nconversation_search latency, query embedding included ({len(latency)} questions)")
    print(
        table(
            ["page_size", "median ms", "p95 ms", "mean ms", "max ms"],
            [[max(ks), *stats_ms(latency).values()]]
            + (
                [[f"{max(ks)}, the {len(dated)} naming days", *stats_ms(dated).values()]]
                if dated
                else []
            ),
        )
    )
    print(
        "\nJSON "
        + json.dumps(
            {"R@5 all but 5": product.summary(ks)[1][2], "conversations": args.conversations}
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
