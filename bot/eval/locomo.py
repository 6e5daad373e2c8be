"""LoCoMo-format conversations as an agent's past (any file in LoCoMo's format).

    read_samples(path, spec)          the conversations, all or by position ("0-4", "5,7")
    import_conversation(session, s)   one agent whose recall storage holds every turn
    evidence_of(qa, dia_of, log)      the gold turn ids of a question, repaired where possible

An imported conversation is past: every turn is a message out of the main context
(`in_context = false`) with its session's date, speaker_a is the member (user, display name)
and speaker_b the agent (assistant; the persona says "I am <speaker_b>"). Turns that share a
photo keep its caption: "[shares a photo: <caption>]".

LoCoMo (Maharana et al., 2024) is CC BY-NC 4.0: read it from where it lies, for evaluation
only; never copy it, or text derived from it, into this repository.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from core.config import EngineConfig
from core.directory import ensure_agent
from core.errors import ConfigError
from core.memory import terms
from core.models import Block, Message, MessageVector
from core.scope import Scope

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
EVIDENCE_ID = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")


def read_samples(path: Path, spec: str | None = None) -> list[dict[str, Any]]:
    try:
        samples = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(f"cannot read LoCoMo data from {path}: {error}") from None
    if not isinstance(samples, list) or not all("conversation" in s for s in samples):
        raise ConfigError(f"{path} is not in LoCoMo's format (a list of conversations)")
    if not spec:
        return samples
    chosen: list[int] = []
    for part in spec.split(","):
        first, _, last = part.partition("-")
        try:
            start, end = int(first), int(last or first)
        except ValueError:
            start, end = 0, -1
        if not 0 <= start <= end:
            raise ConfigError(
                f'--conversations takes positions from 0, such as "0-4" or "5,7", got {spec!r}'
            )
        if end >= len(samples):  # checked before the range is made: "0-99999999999"
            raise ConfigError(f"{path} has {len(samples)} conversations, not {end + 1}")
        chosen += range(start, end + 1)
    return [samples[i] for i in chosen]


@dataclass
class EvidenceLog:
    entries: int = 0
    clean: int = 0
    repaired: list[str] = field(default_factory=list)
    unparseable: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # well formed, but no such turn
    no_evidence: int = 0  # questions left out: nothing usable


def parse_evidence(raw: list[str], known: set[str], log: EvidenceLog) -> set[str]:
    gold: set[str] = set()
    for entry in raw:
        log.entries += 1
        ids = [f"D{int(a)}:{int(b)}" for a, b in EVIDENCE_ID.findall(entry)]  # "D30:05"
        if not ids:
            log.unparseable.append(entry)
            continue
        if ids != [entry]:
            log.repaired.append(f"{entry!r} -> {', '.join(ids)}")
        else:
            log.clean += 1
        for dia_id in ids:
            if dia_id in known:
                gold.add(dia_id)
            else:
                log.unknown.append(dia_id)
    return gold


def parse_when(value: str) -> datetime:
    """LoCoMo's session dates, e.g. '1:56 pm on 8 May, 2023'."""
    return datetime.strptime(value.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def session_numbers(conversation: dict[str, Any]) -> list[int]:
    return sorted(
        int(key.split("_")[1])
        for key, value in conversation.items()
        if re.fullmatch(r"session_\d+", key) and isinstance(value, list)
    )


def turns_of(
    conversation: dict[str, Any], sessions: int | None = None
) -> list[tuple[dict[str, Any], datetime]]:
    """Every turn with its time (turns a minute apart), session by session in order."""
    turns = []
    for n in session_numbers(conversation)[:sessions]:
        start = parse_when(conversation[f"session_{n}_date_time"])
        for i, turn in enumerate(conversation[f"session_{n}"]):
            turns.append((turn, start + timedelta(minutes=i)))
    return turns


def turn_text(turn: dict[str, Any]) -> str:
    words = str(turn["text"])
    if turn.get("blip_caption"):
        words += f" [shares a photo: {turn['blip_caption']}]"
    return words


def persona_of(conversation: dict[str, Any]) -> str:
    return f"I am {conversation['speaker_b']}, a friend of {conversation['speaker_a']}."


async def import_conversation(
    session: AsyncSession,
    sample: dict[str, Any],
    tenant: str = "eval",
    sessions: int | None = None,
) -> tuple[Scope, dict[int, str]]:
    """One agent holding the conversation (its first `sessions` only, when given) as past
    messages; returns its scope and the LoCoMo turn id of each message id."""
    conversation = sample["conversation"]
    scope = await ensure_agent(
        session, tenant, str(sample["sample_id"]), EngineConfig(), conversation["speaker_a"]
    )
    persona = await session.get(Block, (scope.agent_id, "persona"))
    assert persona is not None
    persona.value = persona_of(conversation)
    turns = turns_of(conversation, sessions)
    messages = [
        Message(
            tenant_id=scope.tenant_id,
            agent_id=scope.agent_id,
            role="user" if turn["speaker"] == conversation["speaker_a"] else "assistant",
            content=turn_text(turn),
            search_text=turn_text(turn),
            in_context=False,
            created_at=when,
        )
        for turn, when in turns
    ]
    session.add_all(messages)
    await session.flush()
    # As AgentStore stores a searchable message: a row waiting for its vector, its words counted.
    session.add_all(
        MessageVector(message_id=m.id, tenant_id=m.tenant_id, agent_id=m.agent_id) for m in messages
    )
    await session.flush()
    await terms.rebuild(session, scope)
    return scope, {m.id: t["dia_id"] for m, (t, _) in zip(messages, turns, strict=True)}
