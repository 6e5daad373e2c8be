"""locomo-qa and dmr: the agent answers questions about its past; an LLM judge scores them.

    locomo-qa   the whole conversation imported as past messages; every question with an
                answer (adversarial ones have none) goes to the agent as a member's message
    dmr         deep memory retrieval as in the MemGPT paper: only the first sessions are
                imported, and only questions whose evidence lies in them are asked

The agent sees nothing of the conversation in its main context: it must use its memory
functions. After each question its own messages are removed again, so every question meets
the same memory. The judge (`--judge-model`, the chat model unless set) is told the
question, the gold answer and the reply, and answers CORRECT or WRONG.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.eval.locomo import CATEGORIES, EvidenceLog, import_conversation, parse_evidence
from bot.eval.report import Report, percent
from core.events import EventKind, InboundEvent
from core.memory.embeddings import embed_missing
from core.memory.store import AgentStore
from core.models import Agent
from core.ports import ChatModel
from core.runtime.engine import Engine
from core.scope import Scope

Progress = Callable[[int, int], None]
JUDGE = """You grade a reply to a question about an old conversation.
Question: {question}
Gold answer: {answer}
Reply: {reply}
Is the reply correct: does it give the gold answer or the same thing in other words (a date
may be written differently, extra detail is fine)? Answer with one word: CORRECT or WRONG."""


async def judge(model: ChatModel, question: str, answer: str, reply: str) -> bool:
    prompt = JUDGE.format(question=question, answer=answer, reply=reply or "(no reply)")
    completion = await model.complete([{"role": "user", "content": prompt}], max_tokens=10)
    verdict = re.search(r"\b(CORRECT|WRONG)\b", (completion.content or "").upper())
    return bool(verdict and verdict.group(1) == "CORRECT")


async def answer_questions(
    task: str,
    sessions: async_sessionmaker[AsyncSession],
    engine: Engine,
    judge_model: ChatModel,
    samples: list[dict[str, Any]],
    progress: Progress,
    limit: int | None = None,
    first_sessions: int | None = None,
) -> Report:
    plans = []
    for sample in samples:
        async with sessions() as session, session.begin():
            scope, dia_of = await import_conversation(session, sample, sessions=first_sessions)
        plans.append((sample, scope, _questions(sample, set(dia_of.values()), limit)))
    if engine.mind.embedder is not None:
        await embed_missing(sessions, engine.mind.embedder)
    total = sum(len(questions) for _, _, questions in plans)
    items: list[dict[str, Any]] = []
    progress(0, total)
    for sample, scope, questions in plans:
        for number, qa in enumerate(questions):
            key = f"eval:{sample['sample_id']}:{number}"
            exchange = await engine.converse(
                scope, InboundEvent(EventKind.USER_MESSAGE, qa["question"], key)
            )
            reply = "\n".join(exchange.replies)
            calls = [
                o.call.name
                for s in (exchange.result.steps if exchange.result else [])
                for o in s.outcomes
            ]
            items.append(
                {
                    "conversation": sample["sample_id"],
                    "category": qa.get("category"),
                    "question": qa["question"],
                    "answer": str(qa["answer"]),
                    "reply": reply,
                    "functions": calls,
                    "correct": await judge(judge_model, qa["question"], str(qa["answer"]), reply),
                }
            )
            await _forget_the_exchange(engine, scope)
            progress(len(items), total)
    return _report(task, items)


def _questions(sample: dict[str, Any], known: set[str], limit: int | None) -> list[dict[str, Any]]:
    """Questions with an answer whose evidence is all in the imported turns."""
    chosen = []
    for qa in sample["qa"]:
        evidence = qa.get("evidence") or []
        gold = parse_evidence(evidence, known, EvidenceLog())
        if "answer" in qa and qa.get("category") != 5 and gold and len(gold) == len(evidence):
            chosen.append(qa)
    return chosen[:limit]


async def _forget_the_exchange(engine: Engine, scope: Scope) -> None:
    """Back to the imported past: the question, the reply and any summary go (through the
    store, so a main context kept from the question's turn is not used again)."""
    async with engine.sessions() as session, session.begin():
        store = AgentStore(session, scope, engine.mind.config.max_message_tokens)
        await store.forget_exchanges()
        await session.execute(
            update(Agent)
            .where(Agent.tenant_id == scope.tenant_id, Agent.id == scope.agent_id)
            .values(pressure_warned=False)
        )


def _report(task: str, items: list[dict[str, Any]]) -> Report:
    report = Report(task, ["questions", "n", "correct %", "searched %"])
    groups = [("all", items)]
    groups += [
        (f"{n} {name}", [i for i in items if i["category"] == n]) for n, name in CATEGORIES.items()
    ]
    for label, group in groups:
        if group:
            report.rows.append([label, len(group), *_scores(group)])
    correct, searched = _scores(items)
    report.summary = {"accuracy": correct, "searched": searched, "questions": len(items)}
    report.items = items
    report.notes.append("searched: the share of replies for which the agent called a search")
    return report


def _scores(group: list[dict[str, Any]]) -> tuple[float, float]:
    searches = ("conversation_search", "conversation_search_date", "archival_memory_search")
    return (
        percent([float(i["correct"]) for i in group]),
        percent([float(any(f in searches for f in i["functions"])) for i in group]),
    )
