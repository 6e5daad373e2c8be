"""locomo-recall: evidence recall of conversation_search on conversations in LoCoMo's format.

Offline retrieval: no chat model is called. Each conversation is imported as an agent's past
(`bot.eval.locomo`), its messages get vectors from the configured embedder (the same catch-up
pass the engine runs), and every question with evidence goes through what
`conversation_search` runs (`find_messages`: names left out, full text and vectors fused).

    recall@k = |gold turns among the first k hits| / |gold turns|, averaged over questions

Also how many results each search reported, and the pages the model would be told of and
would read at the product's page size (`EngineConfig.page_size`, 5): paging on until the page
holding the first evidence turn, or through every page when none of the first 25 holds one.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.eval.locomo import (
    CATEGORIES,
    EvidenceLog,
    import_conversation,
    parse_evidence,
    persona_of,
)
from bot.eval.report import Report, percent
from core.config import EngineConfig
from core.memory.embeddings import embed_missing
from core.memory.ranking import agent_name
from core.memory.store import AgentStore
from core.memory.tools import ToolContext, find_messages
from core.ports import Embedder

KS = (5, 10, 25)
Progress = Callable[[int, int], None]


async def locomo_recall(
    sessions: async_sessionmaker[AsyncSession],
    embedder: Embedder | None,
    samples: list[dict[str, Any]],
    progress: Progress,
) -> Report:
    loaded = []
    for sample in samples:
        async with sessions() as session, session.begin():
            loaded.append(await import_conversation(session, sample))
    if embedder is not None:
        await embed_missing(sessions, embedder)
    evidence = EvidenceLog()
    items: list[dict[str, Any]] = []
    total = sum(len(s["qa"]) for s in samples)
    progress(0, total)
    for sample, (scope, dia_of) in zip(samples, loaded, strict=True):
        conversation = sample["conversation"]
        async with sessions() as session:
            ctx = ToolContext(
                AgentStore(session, scope, EngineConfig().max_message_tokens),
                {},
                EngineConfig(page_size=max(KS)),
                datetime.now(UTC),
                embedder=embedder,
                member_name=conversation["speaker_a"],
                agent_name=agent_name(persona_of(conversation)),
            )
            for qa in sample["qa"]:
                gold = parse_evidence(qa.get("evidence") or [], set(dia_of.values()), evidence)
                if gold:
                    page, _ = await find_messages(ctx, qa["question"])
                    found = [dia_of[hit.id] for hit in page.hits]
                    items.append(_item(sample, qa, gold, found, page.total))
                else:
                    evidence.no_evidence += 1
                progress(len(items) + evidence.no_evidence, total)
    return _report(items, evidence)


def _item(
    sample: dict[str, Any], qa: dict[str, Any], gold: set[str], found: list[str], results: int
) -> dict[str, Any]:
    size = EngineConfig().page_size
    pages = max(1, math.ceil(results / size))
    first = next((rank for rank, turn in enumerate(found) if turn in gold), None)
    return {
        "conversation": sample["sample_id"],
        "category": qa.get("category"),
        "question": qa["question"],
        "gold": sorted(gold),
        "found": found,
        **{f"recall@{k}": len(gold & set(found[:k])) / len(gold) for k in KS},
        "results": results,
        "pages": pages,
        "pages read": pages if first is None else first // size + 1,
    }


def _report(items: list[dict[str, Any]], evidence: EvidenceLog) -> Report:
    report = Report("locomo-recall", ["questions", "n"] + [f"R@{k} %" for k in KS])
    groups = [("all", items), ("all but adversarial", [i for i in items if i["category"] != 5])]
    groups += [
        (f"{n} {name}", [i for i in items if i["category"] == n]) for n, name in CATEGORIES.items()
    ]
    for label, group in groups:
        if group:
            scores = [percent([i[f"recall@{k}"] for i in group]) for k in KS]
            report.rows.append([label, len(group), *scores])
    main = [i for i in items if i["category"] != 5]
    report.summary = {f"recall@{k}": percent([i[f"recall@{k}"] for i in main]) for k in KS}
    report.summary["questions"] = len(main)
    if main:
        report.summary["results (median)"] = statistics.median(i["results"] for i in main)
        report.summary["pages told"] = round(statistics.fmean(i["pages"] for i in main), 2)
        report.summary["pages read"] = round(statistics.fmean(i["pages read"] for i in main), 2)
        report.notes.append(
            f"results per question (all but adversarial): median "
            f"{report.summary['results (median)']:g}; at {EngineConfig().page_size} a page, "
            f"pages told {report.summary['pages told']:.2f} and read "
            f"{report.summary['pages read']:.2f} on average (read: up to the page holding the "
            "first evidence turn, or every page when none of the first 25 holds one)"
        )
    report.items = items
    report.notes.append(
        f"evidence ids: {evidence.entries}, repaired {len(evidence.repaired)}, unparseable "
        f"{len(evidence.unparseable)}, naming no turn {len(evidence.unknown)}; "
        f"{evidence.no_evidence} questions without usable evidence left out"
    )
    return report
