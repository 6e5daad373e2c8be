"""No state of the database produces an over-window prompt.

A seeded property test writes random agent states straight into Postgres, bypassing the
store on purpose: messages of any size and role (function calls with their results
included), stored token counts that are zero or simply wrong, an oversized summary and an
oversized working context. Then the member writes, and every request the fake model
receives, turns and summaries alike, must fit the window, and the member must get a real
answer rather than an apology.
"""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from sqlalchemy import update

from core.config import EngineConfig
from core.directory import ensure_agent
from core.events import EventKind, InboundEvent
from core.models import Block, Message, Summary
from tests.fake_openai import count_prompt, is_summary_request, last_user_text, say, summary_of

T0 = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)
WORDS = "amber basil cedar delta ember fjord gale heron iris jade kelp lumen 🦊 ünï".split()
_users = itertools.count()


def chatty(body):
    if is_summary_request(body):
        return summary_of(body)
    return say(f"You said: {last_user_text(body)[:40]}")


@dataclass(frozen=True)
class Item:
    kind: str  # user | assistant | system | call (an assistant call and its results)
    words: int
    stored_tokens: int  # what the row claims it costs: zero, or any wrong number
    calls: int
    in_context: bool


items = st.builds(
    Item,
    kind=st.sampled_from(["user", "assistant", "system", "call"]),
    words=st.one_of(st.integers(0, 300), st.integers(300, 6000)),
    stored_tokens=st.one_of(st.just(0), st.integers(1, 50), st.integers(0, 40_000)),
    calls=st.integers(1, 3),
    in_context=st.booleans() | st.just(True),
)


def text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def rows(item: Item, rng: random.Random, n: int) -> list[dict]:
    """The message rows one item stands for."""
    common = {"tokens": item.stored_tokens, "in_context": item.in_context}
    if item.kind != "call":
        body = text(rng, item.words)
        search = body if item.kind == "user" else None
        return [{"role": item.kind, "content": body, "search_text": search, **common}]
    ids = [f"call_{n}_{i}" for i in range(item.calls)]
    calls = [
        {
            "id": call_id,
            "type": "function",
            "function": {
                "name": "archival_memory_insert",
                "arguments": json.dumps({"content": text(rng, item.words // item.calls)}),
            },
        }
        for call_id in ids
    ]
    call = {"role": "assistant", "content": text(rng, 20), "tool_calls": calls, **common}
    results = [
        {"role": "tool", "content": text(rng, item.words // 2), "tool_call_id": i, **common}
        for i in ids
    ]
    return [call, *results]


async def write_state(sessions, config, user, state, summary_words, human_words, rng):
    async with sessions() as session, session.begin():
        scope = await ensure_agent(session, "t", user, config)
        when = itertools.count()
        for n, item in enumerate(state):
            for row in rows(item, rng, n):
                session.add(
                    Message(
                        tenant_id=scope.tenant_id,
                        agent_id=scope.agent_id,
                        created_at=T0 + timedelta(minutes=next(when)),
                        **row,
                    )
                )
        if summary_words is not None:
            session.add(
                Summary(
                    tenant_id=scope.tenant_id,
                    agent_id=scope.agent_id,
                    text=text(rng, summary_words),
                    covers_messages=sum(not i.in_context for i in state),
                    tokens=rng.choice([0, 40, 90_000]),
                    created_at=T0,
                )
            )
        human = text(rng, human_words)
        await session.execute(
            update(Block)
            .where(Block.agent_id == scope.agent_id, Block.label == "human")
            .values(value=human, char_limit=max(len(human), 2000))
        )
    return scope


@seed(20261201)
@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    state=st.lists(items, min_size=1, max_size=30),
    window=st.sampled_from([4096, 8192, 16384]),
    summary_words=st.none() | st.integers(0, 12_000),
    human_words=st.integers(0, 4000),
    newest_words=st.integers(1, 20_000),
    rng_seed=st.integers(0, 10**6),
)
async def test_no_database_state_makes_an_over_window_prompt(
    make_engine_for,
    fake,
    sessions,
    state,
    window,
    summary_words,
    human_words,
    newest_words,
    rng_seed,
):
    fake.brain = chatty
    fake.requests.clear()
    rng = random.Random(rng_seed)
    config = EngineConfig(
        context_window=window, persona_limit=1000, human_limit=1000, rate_limit=None
    )
    engine = make_engine_for(config)
    user = f"user{next(_users)}"
    scope = await write_state(sessions, config, user, state, summary_words, human_words, rng)
    newest = text(rng, newest_words)
    for said in (newest, "and one more thing"):
        exchange = await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, said))
        assert exchange.replies and exchange.replies[0].startswith("You said:"), exchange.replies
    assert fake.requests
    for body in fake.requests:
        assert count_prompt(body) + (body.get("max_tokens") or 0) <= window
