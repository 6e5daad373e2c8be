"""openers: the MemGPT paper's conversation-opener check, on conversations in LoCoMo's format.

For each conversation, the member's facts from its first sessions (LoCoMo's observations of
speaker_a) are the agent's `human` block, and those sessions are its past messages. Then a
scheduled interrupt asks for a conversation opener, exactly as the scheduler does. An opener
is grounded when it refers to something in the working context: the judge model is shown
the working context and the opener and answers GROUNDED or NOT. Also reported: how many
openers were sent at all (staying quiet is allowed), and the share of the opener's content
words found in the working context (a lexical check that needs no judge).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.eval.locomo import import_conversation, session_numbers
from bot.eval.report import Report, percent
from core.events import EventKind, InboundEvent, Purpose
from core.memory.embeddings import embed_missing
from core.models import Block
from core.ports import ChatModel
from core.runtime.engine import Engine
from core.schedule.planning import OPENER

Progress = Callable[[int, int], None]
JUDGE = """Working context of a companion (facts it keeps about a person):
{context}

The companion opened a conversation with: {opener}

Is this opener grounded in the working context: does it refer to a specific fact listed
above? Answer with one word: GROUNDED or NOT."""
STOPWORDS = set(
    "a an and are at be but by for from have how i i'm in is it its just me my of on or so "
    "that the this to was we what with you your hey hi hello".split()
)


def facts_of(sample: dict[str, Any], sessions: int, limit: int) -> str:
    """The member's observed facts from the first sessions, as many as fit in `limit`."""
    speaker = sample["conversation"]["speaker_a"]
    observations = sample.get("observation") or {}
    lines: list[str] = []
    for n in session_numbers(sample["conversation"])[:sessions]:
        for fact in (observations.get(f"session_{n}_observation") or {}).get(speaker, []):
            line = str(fact[0] if isinstance(fact, list) else fact)
            if sum(len(x) + 1 for x in lines) + len(line) > limit:
                return "\n".join(lines)
            lines.append(line)
    return "\n".join(lines)


def overlap(opener: str, context: str) -> float:
    """The share of the opener's content words that appear in the working context."""
    words = {w for w in re.findall(r"[a-z']{3,}", opener.lower()) if w not in STOPWORDS}
    known = set(re.findall(r"[a-z']{3,}", context.lower()))
    return len(words & known) / len(words) if words else 0.0


async def openers(
    sessions: async_sessionmaker[AsyncSession],
    engine: Engine,
    judge_model: ChatModel,
    samples: list[dict[str, Any]],
    progress: Progress,
    first_sessions: int = 3,
) -> Report:
    items: list[dict[str, Any]] = []
    progress(0, len(samples))
    limit = engine.mind.config.human_limit
    for sample in samples:
        facts = facts_of(sample, first_sessions, limit)
        async with sessions() as session, session.begin():
            scope, _ = await import_conversation(session, sample, sessions=first_sessions)
            human = await session.get(Block, (scope.agent_id, "human"))
            assert human is not None
            human.value = facts
        if engine.mind.embedder is not None:
            await embed_missing(sessions, engine.mind.embedder)
        now = engine.clock()
        ask = OPENER.format(local=now.strftime("%A %H:%M"), zone="UTC", ago="3 days ago")
        event = InboundEvent(
            EventKind.SCHEDULED, ask, f"opener:{sample['sample_id']}", {"purpose": Purpose.OPENER}
        )
        exchange = await engine.converse(scope, event)
        opener = "\n".join(exchange.replies)
        grounded = bool(opener) and await _judge(judge_model, facts, opener)
        items.append(
            {
                "conversation": sample["sample_id"],
                "opener": opener,
                "sent": bool(opener),
                "grounded": grounded,
                "overlap": round(overlap(opener, facts), 3),
            }
        )
        progress(len(items), len(samples))
    return _report(items)


async def _judge(model: ChatModel, context: str, opener: str) -> bool:
    prompt = JUDGE.format(context=context or "(empty)", opener=opener)
    completion = await model.complete([{"role": "user", "content": prompt}], max_tokens=10)
    verdict = re.search(r"\b(GROUNDED|NOT)\b", (completion.content or "").upper())
    return bool(verdict and verdict.group(1) == "GROUNDED")


def _report(items: list[dict[str, Any]]) -> Report:
    sent = [i for i in items if i["sent"]]
    report = Report("openers", ["conversations", "sent %", "grounded % of sent", "word overlap %"])
    grounded = percent([float(i["grounded"]) for i in sent])
    words = percent([i["overlap"] for i in sent])
    report.rows.append([len(items), percent([float(i["sent"]) for i in items]), grounded, words])
    report.summary = {"grounded": grounded, "sent": len(sent), "conversations": len(items)}
    report.items = items
    return report
