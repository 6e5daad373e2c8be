"""Faults of the model endpoint, through the real `openai` client and its retries.

The member must always get an answer: the normal reply when a retry succeeds; while the
endpoint is down, one notice and the answer once it is back; otherwise a clear apology,
with their message kept in recall so nothing they said is lost.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web
from sqlalchemy import select

from core.events import EventKind, InboundEvent
from core.memory.search import recall_search
from core.models import Event
from core.runtime.apologies import INTERNAL_ERROR_REPLY, WAITING_NOTICE
from core.wire.outage import LONGEST_WAIT
from tests.fake_openai import (
    calls,
    count_prompt,
    is_summary_request,
    last,
    last_user_text,
    raw_call,
    say,
    summary_of,
    tool_call,
)


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client's own backoff (0.5 s, doubling) made tiny: these tests count retries."""
    monkeypatch.setattr("openai._base_client.INITIAL_RETRY_DELAY", 0.001)


def script(*answers: Any) -> Callable[[dict[str, Any]], Any]:
    """A brain that gives the n-th chat request the n-th answer (the last one from then on)."""
    seen: list[dict[str, Any]] = []

    def brain(body: dict[str, Any]) -> Any:
        if is_summary_request(body):
            return summary_of(body)
        seen.append(body)
        answer = answers[min(len(seen), len(answers)) - 1]
        return answer(body) if callable(answer) else answer

    return brain


def echo(body: dict[str, Any]) -> dict[str, Any]:
    return say("You said: " + last_user_text(body))


async def talk(engine, scope, text: str):
    return await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, text))


async def status_of(engine, event_id: int) -> tuple[str, str | None]:
    async with engine.sessions() as session:
        row = (
            await session.execute(select(Event.status, Event.error).where(Event.id == event_id))
        ).one()
    return row.status, row.error


async def recalled(engine, scope, query: str) -> list[tuple[str, str]]:
    async with engine.sessions() as session:
        page = await recall_search(session, scope, query)
    return [(hit.kind, hit.text) for hit in page.hits]


def is_apology(reply: str) -> bool:
    return reply.startswith("Sorry") and "saved" in reply


async def assert_recovers(engine, fake, scope) -> None:
    """The next message is handled normally."""
    fake.brain = echo
    fake.requests.clear()
    exchange = await talk(engine, scope, "are you back?")
    assert exchange.replies == ["You said: are you back?"]
    assert await status_of(engine, exchange.event_id) == ("done", None)


# --- retried failures ------------------------------------------------------------------------


async def test_a_500_then_success_gets_the_normal_reply(make_engine_for, fake):
    engine = make_engine_for(retries=2)
    fake.brain = echo
    fake.fail_next(500)
    scope = await engine.agent("t", "alice")

    exchange = await talk(engine, scope, "hello")

    assert exchange.replies == ["You said: hello"]
    assert len(fake.requests) == 2  # the failed attempt, then the retry
    assert fake.raw_requests[0] == fake.raw_requests[1]

    assert await status_of(engine, exchange.event_id) == ("done", None)


async def test_a_429_with_retry_after_is_retried(make_engine_for, fake):
    engine = make_engine_for(retries=1)
    fake.brain = echo
    fake.fail_next(429, headers={"Retry-After": "0"})
    scope = await engine.agent("t", "alice")

    exchange = await talk(engine, scope, "hello")

    assert exchange.replies == ["You said: hello"]
    assert len(fake.requests) == 2
    assert await status_of(engine, exchange.event_id) == ("done", None)


# --- failures that outlast the retries -------------------------------------------------------


async def answer_after_outage(engine, fake, clock, event_id: int) -> list[str]:
    """The model is back: what the run loop's backlog pass brings that event."""
    fake.brain = echo
    fake.requests.clear()
    clock.advance(seconds=LONGEST_WAIT)  # the next probe is due
    await engine.resume()
    assert await status_of(engine, event_id) == ("done", None)
    return await engine.outbox.take_replies(event_id)


async def test_persistent_500s_leave_the_message_waiting_with_a_notice(
    make_engine_for, fake, clock
):
    engine = make_engine_for(retries=2)
    fake.brain = echo
    fake.fail_next(500, times=3)
    scope = await engine.agent("t", "alice")

    exchange = await talk(engine, scope, "my zucchini finally sprouted")

    assert len(fake.requests) == 3  # one try and two retries, then the endpoint is down
    assert exchange.replies == [WAITING_NOTICE]  # the server's words go to the log
    status, error = await status_of(engine, exchange.event_id)
    assert status == "pending" and "500" in (error or "")
    assert await recalled(engine, scope, "zucchini") == [("user", "my zucchini finally sprouted")]

    answer = await answer_after_outage(engine, fake, clock, exchange.event_id)
    assert answer == ["You said: my zucchini finally sprouted"]
    # The model sees the message once: stored before the outage, not again after it.
    sent = json.dumps(fake.chat_requests[0]["messages"])
    assert sent.count("my zucchini finally sprouted") == 1
    await assert_recovers(engine, fake, scope)


async def test_a_probe_of_a_down_endpoint_is_one_request_not_a_round_of_retries(
    make_engine_for, fake, clock
):
    engine = make_engine_for(retries=3)
    fake.brain = echo
    scope = await engine.agent("t", "alice")
    fake.down = 503
    exchange = await talk(engine, scope, "are you there?")
    assert exchange.replies == [WAITING_NOTICE]
    assert fake.down_calls == 4  # the call that found it down: one try and three retries

    for probe in (1, 2, 3):
        clock.advance(seconds=LONGEST_WAIT)  # a probe is due
        await engine.resume()
        assert fake.down_calls == 4 + probe, "a probe asked the dead endpoint more than once"

    fake.down = None
    clock.advance(seconds=LONGEST_WAIT)
    await engine.resume()
    assert await engine.outbox.take_replies(exchange.event_id) == ["You said: are you there?"]


async def test_a_failure_mid_turn_keeps_the_steps_and_goes_on_from_them(
    make_engine_for, fake, clock
):
    """A turn saves each step before its next model call (no transaction waits on the
    model): an outage after a step keeps that step whole, the call with its result, and
    what it did (the fact saved); once the model is back the turn goes on from there, the
    member's words once."""
    engine = make_engine_for(retries=0)
    scope = await engine.agent("t", "alice")

    def brain(body: dict[str, Any]) -> Any:
        fake.fail_next(500)  # the call after this one fails
        return calls(tool_call("core_memory_append", label="human", content="Grows zucchini."))

    fake.brain = brain
    exchange = await talk(engine, scope, "I grow zucchini")

    assert len(fake.requests) == 2
    assert exchange.replies == [WAITING_NOTICE]
    assert await recalled(engine, scope, "zucchini") == [("user", "I grow zucchini")]

    answer = await answer_after_outage(engine, fake, clock, exchange.event_id)
    assert answer == ["You said: I grow zucchini"]
    (body,) = fake.chat_requests  # one call finishes the turn
    assert json.dumps(body["messages"]).count("I grow zucchini") == 1
    (step,) = [m for m in body["messages"] if m.get("tool_calls")]  # the step, whole
    assert step["tool_calls"][0]["function"]["name"] == "core_memory_append"
    result = body["messages"][body["messages"].index(step) + 1]
    assert result["role"] == "tool" and result["content"].startswith("Block 'human' now has")
    assert "Grows zucchini." in body["messages"][0]["content"]  # what it did stays done


MALFORMED = {
    "no choices": lambda: web.json_response({"choices": []}),
    "empty object": lambda: web.json_response({}),
    "message null": lambda: web.json_response(
        {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "fake",
            "choices": [{"index": 0, "message": None, "finish_reason": "stop"}],
        }
    ),
    "html page": lambda: web.Response(
        text="<html><body>502 Bad Gateway</body></html>", content_type="text/html"
    ),
    "truncated JSON": lambda: web.Response(
        text='{"choices": [{"message": {"role": "assist', content_type="application/json"
    ),
}


@pytest.mark.parametrize("kind", list(MALFORMED))
async def test_a_malformed_answer_gives_an_apology(make_engine_for, fake, kind):
    engine = make_engine_for(retries=0)
    fake.brain = script(lambda body: MALFORMED[kind]())
    scope = await engine.agent("t", "alice")

    exchange = await talk(engine, scope, "hello there")

    (reply,) = exchange.replies
    assert is_apology(reply)
    assert (await status_of(engine, exchange.event_id))[0] == "failed"
    assert await recalled(engine, scope, "hello") == [("user", "hello there")]
    await assert_recovers(engine, fake, scope)


@pytest.mark.parametrize("kind", list(MALFORMED))
async def test_a_malformed_answer_is_blamed_on_the_model(make_engine_for, fake, kind):
    """Not "something went wrong on my side": the endpoint sent garbage, and the apology says
    so (a ModelError, as core.llm promises for whatever the endpoint does wrong)."""
    engine = make_engine_for(retries=0)
    fake.brain = script(lambda body: MALFORMED[kind]())
    scope = await engine.agent("t", "alice")

    exchange = await talk(engine, scope, "hello there")

    (reply,) = exchange.replies
    assert reply != INTERNAL_ERROR_REPLY
    assert reply.startswith("Sorry, I can't think right now: the model")


async def test_an_empty_answer_is_not_silence(make_engine_for, fake):
    engine = make_engine_for(retries=0)
    fake.brain = script(
        {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "fake",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": None},
                    "finish_reason": "stop",
                }
            ],
        }
    )
    scope = await engine.agent("t", "alice")

    exchange = await talk(engine, scope, "hello there")

    assert len(exchange.replies) == 1 and exchange.replies[0].strip()
    await assert_recovers(engine, fake, scope)


async def test_a_model_that_keeps_timing_out_leaves_the_message_waiting(
    make_engine_for, fake, clock
):
    engine = make_engine_for(retries=0, timeout=0.5)
    fake.brain = echo
    fake.delay = 0.8
    scope = await engine.agent("t", "alice")

    exchange = await talk(engine, scope, "slow day?")

    assert len(fake.requests) == 2  # asked again once, then it is down
    assert exchange.replies == [WAITING_NOTICE]
    status, error = await status_of(engine, exchange.event_id)
    assert status == "pending" and "did not answer in time" in (error or "")
    assert await recalled(engine, scope, "slow") == [("user", "slow day?")]
    fake.delay = 0
    assert await answer_after_outage(engine, fake, clock, exchange.event_id) == [
        "You said: slow day?"
    ]


# --- huge and hostile tool calls -------------------------------------------------------------


def garbage(size: int, seed: int = 7) -> str:
    """Printable noise with braces, quotes, control characters and non-ASCII, not JSON."""
    rng = random.Random(seed)
    alphabet = 'abcXYZ019 {}[]":,\\\n\t\x01\x7féü中😀'
    return "}" + "".join(rng.choice(alphabet) for _ in range(size))


HUGE_CALLS = {
    "garbage arguments": (
        lambda: raw_call("archival_memory_insert", garbage(100_000)),
        "Error: the arguments are not valid JSON",
    ),
    "a huge unknown argument": (
        lambda: raw_call("send_message", json.dumps({"message": "hi", "k" * 100_000: 1})),
        "Error: unknown argument(s) kkkk",
    ),
    "a huge function name": (
        lambda: raw_call("x" * 100_000, "{}"),
        "Error: unknown function 'xxxx",
    ),
}


@pytest.mark.parametrize("kind", list(HUGE_CALLS))
async def test_a_huge_tool_call_gets_an_error_and_the_prompt_stays_bounded(engine, fake, kind):
    make_call, error = HUGE_CALLS[kind]
    fake.brain = script(lambda body: calls(make_call()), say("Sorry, I garbled that."))
    scope = await engine.agent("t", "alice")
    window = engine.mind.config.context_window

    exchange = await talk(engine, scope, "hello")

    assert exchange.replies == ["Sorry, I garbled that."]
    body = fake.chat_requests[1]
    result = last(body)
    assert result["role"] == "tool"
    assert result["content"].startswith(error)
    assert len(result["content"]) <= engine.mind.config.max_tool_output_chars + 100
    # The next prompt, and the one after, stay far inside the window.
    assert len(json.dumps(body)) < 40_000
    assert count_prompt(body) < window // 2

    fake.brain = script(say("Fine now."))
    fake.requests.clear()
    assert (await talk(engine, scope, "and now?")).replies == ["Fine now."]
    assert count_prompt(fake.chat_requests[0]) < window // 2


NUL_ANSWERS = {
    "in its private thought": (
        calls(tool_call("conversation_search", query="tea"), thought="let me\x00 think"),
        say("Nothing about tea yet."),
    ),
    "in broken arguments": (
        calls(raw_call("archival_memory_insert", '{"content": "tea\x00')),
        say("Nothing about tea yet."),
    ),
    "in the message it sends": (say("Nothing about\x00 tea yet."),),
}


@pytest.mark.parametrize("where", list(NUL_ANSWERS))
async def test_a_nul_byte_from_the_model_does_not_lose_the_answer(engine, fake, where):
    """Postgres text cannot hold NUL; the engine must not let the model's NUL sink the turn."""
    fake.brain = script(*NUL_ANSWERS[where])
    scope = await engine.agent("t", "alice")

    exchange = await talk(engine, scope, "did I mention tea?")

    (reply,) = exchange.replies
    assert not is_apology(reply)
    assert reply.startswith("Nothing about") and reply.endswith("tea yet.")
    assert await status_of(engine, exchange.event_id) == ("done", None)
