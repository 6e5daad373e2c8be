"""nested-kv: the MemGPT paper's nested key-value retrieval, from archival memory.

The data are the paper's files: `kv-retrieval-140_keys.jsonl.gz` (140 UUID key-value pairs;
the first record is used, as the paper does) and
`random_orderings_100_samples_140_indices_<L>_levels.jsonl` (per sample, the indices of the
pairs chained together). For sample s at nesting level L the value of the key at index i_1
is replaced by the key at index i_2, and so on: the answer is the value at the end of the
chain. Level 1 is plain key-value retrieval.

Each pair is one archival passage ("<key>": "<value>"); the agent gets the paper's own
instruction and is correct when its reply contains the final value.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.eval.report import Report, percent
from core.config import EngineConfig
from core.directory import ensure_agent
from core.errors import ConfigError
from core.events import EventKind, InboundEvent
from core.memory.embeddings import embed_missing
from core.memory.store import AgentStore
from core.runtime.engine import Engine

Progress = Callable[[int, int], None]
KV_FILE = "kv-retrieval-140_keys.jsonl.gz"
ORDERINGS = "random_orderings_100_samples_140_indices_{levels}_levels.jsonl"
ASK = (
    "I've given you a list of key-value pairs which you can find in your archival memory, all "
    "keys and values are 128-bit UUIDs, and your task is to return the value associated with "
    "the specified key. If a value itself is also a key, return the value of that key (do a "
    "nested lookup). For example, if the value of 'x' is 'y', but 'y' is also a key, return "
    "the value of key 'y'. Your task is to provide the value for the following key: {key}. "
    "Answer only with the value, nothing else."
)


def _lines(path: Path) -> list[Any]:
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as handle:
            return [json.loads(line) for line in handle if line.strip()]
    except (OSError, ValueError) as error:
        raise ConfigError(f"cannot read {path}: {error}") from None


def nested_case(pairs: list[list[str]], chain: list[int]) -> tuple[dict[str, str], str, str]:
    """(the pairs after nesting, the key asked for, the answer) for one ordering."""
    kv = dict((k, v) for k, v in pairs)
    keys = list(kv)
    for here, there in zip(chain, chain[1:], strict=False):
        kv[keys[here]] = keys[there]
    key = keys[chain[0]]
    value = kv[key]
    while value in kv:
        value = kv[value]
    return kv, key, value


async def nested_kv(
    sessions: async_sessionmaker[AsyncSession],
    engine: Engine,
    data: Path,
    levels: list[int],
    samples: int,
    progress: Progress,
) -> Report:
    pairs = _lines(data / KV_FILE)[0]["ordered_kv_records"]
    cases = []
    for level in levels:
        for number, chain in enumerate(_lines(data / ORDERINGS.format(levels=level))[:samples]):
            cases.append((level, number, *nested_case(pairs, chain)))
    items: list[dict[str, Any]] = []
    progress(0, len(cases))
    for level, number, kv, key, value in cases:
        async with sessions() as session, session.begin():
            scope = await ensure_agent(session, "eval-kv", f"L{level}-{number}", EngineConfig())
            store = AgentStore(session, scope, engine.mind.config.max_message_tokens)
            for k, v in kv.items():
                await store.add_passage(f'"{k}": "{v}"', engine.clock(), "kv")
        if engine.mind.embedder is not None:
            await embed_missing(sessions, engine.mind.embedder)
        exchange = await engine.converse(
            scope, InboundEvent(EventKind.USER_MESSAGE, ASK.format(key=key), f"kv:{level}:{number}")
        )
        reply = "\n".join(exchange.replies)
        items.append(
            {
                "levels": level,
                "sample": number,
                "key": key,
                "answer": value,
                "reply": reply,
                "correct": value in reply,
            }
        )
        progress(len(items), len(cases))
    report = Report("nested-kv", ["nesting levels", "n", "correct %"])
    for level in levels:
        group = [float(i["correct"]) for i in items if i["levels"] == level]
        report.rows.append([level, len(group), percent(group)])
    report.summary = {
        "accuracy": percent([float(i["correct"]) for i in items]),
        "cases": len(items),
    }
    report.items = items
    return report
