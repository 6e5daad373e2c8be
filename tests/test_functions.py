"""The function executor as the model experiences it.

Every test scripts the fake model, then checks two things: what the model is shown in its
next request (the function result in the `tool` message that answers its call) and what the
member finally receives.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import func, select

from core.config import EngineConfig
from core.errors import ToolError
from core.events import MAX_EVENT_CHARS, EventKind, InboundEvent
from core.memory.executor import MODELS, parse_arguments
from core.memory.prompt import for_member
from core.memory.search import recall_search
from core.memory.tools import TOOLS, conversation_search, send_message
from core.memory.turn import STEP_CAP_REPLY
from core.models import Block, Passage
from tests.fake_openai import (
    calls,
    completion,
    default_brain,
    is_summary_request,
    latest_results,
    raw_call,
    say,
    summary_of,
    tool_call,
)

Answer = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]


def script(*answers: Answer) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A brain that gives the n-th chat request the n-th answer (the last one from then on).

    An answer is a response body or a function of the request body; a function is called
    afresh each time, so repeated answers get new tool-call ids.
    """
    seen: list[dict[str, Any]] = []

    def brain(body: dict[str, Any]) -> dict[str, Any]:
        if is_summary_request(body):
            return summary_of(body)
        seen.append(body)
        answer = answers[min(len(seen), len(answers)) - 1]
        return answer(body) if callable(answer) else answer

    return brain


shown_results = latest_results  # the results of the model's latest calls, as it sees them


def user_paragraphs(body: dict[str, Any]) -> list[str]:
    """Each alert and message in the user-role messages (merged ones apart again)."""
    return [
        part
        for m in body["messages"]
        if m["role"] == "user"
        for part in str(m["content"]).split("\n\n")
    ]


def system_prompt(body: dict[str, Any]) -> str:
    assert body["messages"][0]["role"] == "system"
    return body["messages"][0]["content"]


def block_section(body: dict[str, Any], label: str) -> str:
    """The text of one working-context block as the model sees it in the system prompt."""
    prompt = system_prompt(body)
    start = prompt.index(f"<{label} ")
    end = prompt.index(f"</{label}>", start) + len(f"</{label}>")
    return prompt[start:end]


async def talk(engine, scope, text: str):
    return await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, text))


async def stored_block(engine, scope, label: str) -> str:
    async with engine.sessions() as session:
        return await session.scalar(
            select(Block.value).where(Block.agent_id == scope.agent_id, Block.label == label)
        )


DEFAULT_HUMAN = EngineConfig().default_human


# --- every kind of mistake is shown to the model, which recovers ----------------------------

MISTAKES = {
    "unknown function": (
        raw_call("send_mesage", '{"message": "hi"}'),
        ["Error: unknown function 'send_mesage'", "send_message", "archival_memory_search"],
    ),
    "arguments not JSON": (
        raw_call("send_message", '{"message": "hi"'),
        ["Error: the arguments are not valid JSON"],
    ),
    "arguments a JSON list": (
        raw_call("send_message", '["hi"]'),
        ["Error: the arguments must be a JSON object"],
    ),
    "missing required argument": (
        tool_call("core_memory_append", label="human"),
        ["Error: missing required argument(s): content"],
    ),
    "unknown argument": (
        tool_call("send_message", message="hi", tone="warm"),
        ["Error: unknown argument(s) tone", "send_message takes message"],
    ),
    "wrong type": (
        tool_call("conversation_search", query="tea", page="abc"),
        ["Error: argument 'page' must be a", "integer", '"abc"'],
    ),
    "no such block": (
        tool_call("core_memory_append", label="pets", content="a cat"),
        ["Error: there is no block 'pets'", "human", "persona"],
    ),
    "replace text not present": (
        tool_call("core_memory_replace", label="human", old_content="likes tea", new_content="x"),
        ["Error: old_content was not found in block 'human'"],
    ),
    "bad date": (
        tool_call("conversation_search_date", start_date="last week", end_date="2026-03-01"),
        ["Error: start_date must be a date as YYYY-MM-DD", "'last week'"],
    ),
    "end before start": (
        tool_call("conversation_search_date", start_date="2026-03-01", end_date="2026-02-01"),
        ["Error: end_date 2026-02-01 is before start_date 2026-03-01"],
    ),
    "empty send_message": (
        tool_call("send_message", message="   "),
        ["Error: message is empty"],
    ),
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
async def test_a_mistake_is_fed_back_and_the_agent_recovers(engine, fake, mistake):
    bad_call, expected = MISTAKES[mistake]
    fake.brain = script(calls(bad_call), say("Sorry, here is my real answer."))
    scope = await engine.agent("t", "alice")

    exchange = await talk(engine, scope, "hello")

    assert len(fake.chat_requests) == 2
    (result,) = shown_results(fake.chat_requests[1])
    for text in expected:
        assert text in result
    # The member never sees the failed call's message, only the recovered answer.
    assert exchange.replies == ["Sorry, here is my real answer."]
    first, second = exchange.result.steps
    assert [o.ok for o in first.outcomes] == [False]
    assert first.outcomes[0].result == result
    assert [(o.call.name, o.ok) for o in second.outcomes] == [("send_message", True)]
    assert await stored_block(engine, scope, "human") == DEFAULT_HUMAN


async def test_append_over_the_limit_is_refused_and_the_block_kept(make_engine_for, fake):
    engine = make_engine_for(config=EngineConfig(human_limit=60))
    scope = await engine.agent("t", "alice")
    fits = "x" * (60 - len(DEFAULT_HUMAN) - 1)  # the newline joining lines counts too
    fake.brain = script(
        calls(tool_call("core_memory_append", label="human", content=fits)),
        calls(tool_call("core_memory_append", label="human", content="y")),
        say("Saved what fits."),
    )

    exchange = await talk(engine, scope, "remember a lot")

    exact, over = (shown_results(r)[0] for r in fake.chat_requests[1:3])
    assert exact == "Block 'human' now has 60 of 60 characters."
    assert over.startswith("Error: block 'human' would have 62 characters, over its limit of 60")
    assert "core_memory_replace" in over
    assert f'<human characters="60/60">\n{DEFAULT_HUMAN}\n{fits}\n</human>' == block_section(
        fake.chat_requests[2], "human"
    )
    assert block_section(fake.chat_requests[2], "human") == block_section(
        fake.chat_requests[1], "human"
    )
    assert exchange.replies == ["Saved what fits."]
    assert await stored_block(engine, scope, "human") == f"{DEFAULT_HUMAN}\n{fits}"


async def test_search_page_out_of_range_names_the_real_page_count(engine, fake):
    scope = await engine.agent("t", "alice")
    for n in range(3):  # 3 member messages + 3 replies mention jazz: 2 pages of 5
        await talk(engine, scope, f"I listened to jazz, album {n}")
    fake.requests.clear()
    fake.brain = script(
        calls(tool_call("conversation_search", query="jazz", page=4)),
        calls(tool_call("conversation_search", query="jazz", page=2)),
        say("Found it."),
    )

    exchange = await talk(engine, scope, "what about that music?")

    out_of_range, last_page = (shown_results(r)[0] for r in fake.chat_requests[1:3])
    assert out_of_range.startswith("Error:")
    assert "page 4 is out of range" in out_of_range
    assert "there are 2 pages" in out_of_range
    assert last_page.startswith("Showing messages: page 2 of 2 (6 results).")
    assert exchange.replies == ["Found it."]


# --- what the model is offered ---------------------------------------------------------------

REFERENCE = {
    "send_message": {"message": "string"},
    "core_memory_append": {"label": "string", "content": "string"},
    "core_memory_replace": {"label": "string", "old_content": "string", "new_content": "string"},
    "conversation_search": {"query": "string", "page": "integer"},
    "conversation_search_date": {"start_date": "string", "end_date": "string", "page": "integer"},
    "archival_memory_insert": {"content": "string"},
    "archival_memory_search": {"query": "string", "page": "integer"},
}


async def test_the_seven_function_schemas(engine, fake):
    scope = await engine.agent("t", "alice")
    await talk(engine, scope, "hello")

    body = fake.chat_requests[0]
    assert body["tool_choice"] == "auto"
    tools = body["tools"]
    assert [t["function"]["name"] for t in tools] == list(REFERENCE)
    for tool in tools:
        assert tool["type"] == "function"
        fn = tool["function"]
        name, params = fn["name"], fn["parameters"]
        expected = dict(REFERENCE[name])
        if name != "send_message":
            expected["request_heartbeat"] = "boolean"
        assert params["type"] == "object"
        assert {k: v["type"] for k, v in params["properties"].items()} == expected, name
        optional = {"page", "request_heartbeat"}
        assert params["required"] == [k for k in REFERENCE[name] if k not in optional], name
        assert fn["description"].strip(), name
        for arg, spec in params["properties"].items():
            assert spec["description"].strip(), f"{name}.{arg} has no description"


# --- heartbeats: when the model runs again ---------------------------------------------------


async def test_request_heartbeat_runs_the_model_again(engine, fake):
    fake.brain = script(
        calls(
            tool_call(
                "core_memory_append", label="human", content="Has a cat.", request_heartbeat=True
            )
        ),
        say("Noted your cat."),
    )
    scope = await engine.agent("t", "alice")

    exchange = await talk(engine, scope, "I have a cat")

    assert len(fake.chat_requests) == 2
    assert shown_results(fake.chat_requests[1]) == ["Block 'human' now has 47 of 2000 characters."]
    assert exchange.result.steps[0].outcomes[0].heartbeat is True
    assert exchange.replies == ["Noted your cat."]


async def test_memory_and_search_functions_continue_without_the_flag(engine, fake):
    fake.brain = script(
        calls(tool_call("conversation_search", query="cat")),
        calls(tool_call("archival_memory_search", query="cat")),
        calls(
            tool_call("conversation_search_date", start_date="2026-03-01", end_date="2026-03-01")
        ),
        calls(tool_call("archival_memory_insert", content="Alice has a cat.")),
        calls(tool_call("core_memory_append", label="human", content="Has a cat.")),
        calls(
            tool_call(
                "core_memory_replace", label="human", old_content="cat", new_content="tabby cat"
            )
        ),
        say("Got it."),
    )
    scope = await engine.agent("t", "alice")

    exchange = await talk(engine, scope, "I have a cat")

    assert len(fake.chat_requests) == 7
    steps = exchange.result.steps
    assert [o.heartbeat for s in steps for o in s.outcomes] == [False] * 7
    assert all(o.ok for s in steps for o in s.outcomes)
    shown = [shown_results(r)[0] for r in fake.chat_requests[1:]]
    assert shown[0] == 'Nothing matched "cat": no messages share its words.'
    assert shown[1] == 'Nothing matched "cat": no passages share its words.'
    assert shown[3] == "Stored in archival memory."
    assert exchange.replies == ["Got it."]
    assert await stored_block(engine, scope, "human") == f"{DEFAULT_HUMAN}\nHas a tabby cat."


async def test_send_message_ends_the_turn(engine, fake):
    fake.brain = script(say("Hi!"), say("never sent"))
    scope = await engine.agent("t", "alice")

    exchange = await talk(engine, scope, "hello")

    assert len(fake.chat_requests) == 1
    assert exchange.replies == ["Hi!"]


async def test_send_message_with_a_memory_write_ends_the_turn(engine, fake):
    fake.brain = script(
        calls(
            tool_call("core_memory_append", label="human", content="Likes tea."),
            tool_call("send_message", message="Tea, lovely."),
        ),
        say("never sent"),
    )
    scope = await engine.agent("t", "alice")

    exchange = await talk(engine, scope, "I like tea")

    assert len(fake.chat_requests) == 1
    assert exchange.replies == ["Tea, lovely."]
    assert await stored_block(engine, scope, "human") == f"{DEFAULT_HUMAN}\nLikes tea."


async def test_heartbeat_beside_send_message_runs_the_model_again(engine, fake):
    fake.brain = script(
        calls(
            tool_call("send_message", message="One moment."),
            tool_call("conversation_search", query="tea", request_heartbeat=True),
        ),
        say("Nothing about tea yet."),
    )
    scope = await engine.agent("t", "alice")

    exchange = await talk(engine, scope, "did I mention tea?")

    assert len(fake.chat_requests) == 2
    nothing = 'Nothing matched "tea": no messages share its words.'
    assert shown_results(fake.chat_requests[1]) == ["Sent.", nothing]
    assert exchange.replies == ["One moment.", "Nothing about tea yet."]


async def test_a_failed_call_beside_send_message_forces_another_step(engine, fake):
    fake.brain = script(
        calls(
            tool_call("core_memory_replace", label="human", old_content="tea", new_content="x"),
            tool_call("send_message", message="Updated!"),
        ),
        say("Actually, I could not update that."),
        say("never sent"),
    )
    scope = await engine.agent("t", "alice")

    exchange = await talk(engine, scope, "I no longer like tea")

    assert len(fake.chat_requests) == 2
    failed, sent = shown_results(fake.chat_requests[1])
    assert failed.startswith("Error: old_content was not found")
    assert sent == "Sent."
    assert exchange.replies == ["Updated!", "Actually, I could not update that."]


# --- the step cap ----------------------------------------------------------------------------


def search_forever(body: dict[str, Any]) -> dict[str, Any]:
    return calls(tool_call("conversation_search", query="anything"))


@pytest.mark.parametrize("max_steps", [None, 3])
async def test_a_model_that_never_stops_is_capped(make_engine_for, fake, max_steps):
    config = EngineConfig() if max_steps is None else EngineConfig(max_steps=max_steps)
    engine = make_engine_for(config=config)
    expected_calls = 10 if max_steps is None else max_steps
    fake.brain = script(search_forever)
    scope = await engine.agent("t", "alice")

    exchange = await talk(engine, scope, "hello")

    assert len(fake.chat_requests) == expected_calls
    assert len(exchange.result.steps) == expected_calls
    assert exchange.replies == [STEP_CAP_REPLY]
    assert exchange.replies[0].strip()

    # The model is told, on its next turn, that the previous one was cut short.
    fake.brain = script(say("Sorry about that."))
    fake.requests.clear()
    assert (await talk(engine, scope, "hello?")).replies == ["Sorry about that."]
    alerts = user_paragraphs(fake.chat_requests[0])
    assert (
        f"[system alert] step limit reached: your turn was ended after {expected_calls} "
        "steps." in alerts
    )


async def test_the_cap_keeps_a_message_already_sent(make_engine_for, fake):
    engine = make_engine_for(config=EngineConfig(max_steps=3))
    fake.brain = script(
        calls(
            tool_call("send_message", message="Let me look."),
            tool_call("conversation_search", query="anything", request_heartbeat=True),
        ),
        search_forever,
    )
    scope = await engine.agent("t", "alice")

    exchange = await talk(engine, scope, "hello")

    assert len(fake.chat_requests) == 3
    assert exchange.replies == ["Let me look."]


# --- working-context blocks ------------------------------------------------------------------


async def test_an_append_within_the_limit_persists(make_engine_for, fake):
    engine = make_engine_for()
    fake.brain = script(
        calls(tool_call("core_memory_append", label="human", content="Has a cat named Miso.")),
        say("Miso is a lovely name."),
    )
    scope = await engine.agent("t", "alice")

    exchange = await talk(engine, scope, "my cat is Miso")

    value = f"{DEFAULT_HUMAN}\nHas a cat named Miso."
    assert shown_results(fake.chat_requests[1]) == [
        f"Block 'human' now has {len(value)} of 2000 characters."
    ]
    assert block_section(fake.chat_requests[1], "human") == (
        f'<human characters="{len(value)}/2000">\n{value}\n</human>'
    )
    assert "Has a cat named Miso." not in system_prompt(fake.chat_requests[0])
    assert exchange.replies == ["Miso is a lovely name."]

    # A new engine (a restart) on the same database shows the block to the model.
    fresh = make_engine_for()
    fake.brain = script(say("Hello again."))
    fake.requests.clear()
    scope_again = await fresh.agent("t", "alice")
    assert scope_again == scope
    assert (await talk(fresh, scope_again, "hi")).replies == ["Hello again."]
    assert f"{value}\n</human>" in system_prompt(fake.chat_requests[0])
    assert await stored_block(fresh, scope, "human") == value


async def test_replace_with_empty_new_content_deletes_text(engine, fake):
    fake.brain = script(
        calls(tool_call("core_memory_append", label="human", content="Likes tea. Hates coffee.")),
        calls(
            tool_call(
                "core_memory_replace", label="human", old_content=" Hates coffee.", new_content=""
            )
        ),
        say("Coffee is forgotten."),
    )
    scope = await engine.agent("t", "alice")

    exchange = await talk(engine, scope, "I don't hate coffee any more")

    value = f"{DEFAULT_HUMAN}\nLikes tea."
    assert "Hates coffee." in block_section(fake.chat_requests[1], "human")
    assert shown_results(fake.chat_requests[2]) == [
        f"Block 'human' now has {len(value)} of 2000 characters."
    ]
    assert block_section(fake.chat_requests[2], "human") == (
        f'<human characters="{len(value)}/2000">\n{value}\n</human>'
    )
    assert exchange.replies == ["Coffee is forgotten."]
    assert await stored_block(engine, scope, "human") == value


# --- plain answers ---------------------------------------------------------------------------


async def test_a_plain_answer_is_the_reply(engine, fake):
    fake.brain = script(completion("Just plain words, no functions."), say("never sent"))
    scope = await engine.agent("t", "alice")

    exchange = await talk(engine, scope, "hello")

    assert len(fake.chat_requests) == 1
    assert exchange.replies == ["Just plain words, no functions."]
    async with engine.sessions() as session:  # and it is in recall like any reply
        found = await recall_search(session, scope, "plain words")
    assert [(h.kind, h.text) for h in found.hits] == [
        ("assistant", "Just plain words, no functions.")
    ]


def _prompt_end(body: dict[str, Any]) -> str:
    """The end of the prompt as a small model copies it: the status alert and all."""
    return str(body["messages"][-1]["content"])


def parrot(how: str, words: Callable[[str], str]) -> Answer:
    """A small model that answers with `words(the end of its prompt)`, in plain words or
    through send_message."""

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        said = words(_prompt_end(body))
        if how == "plain words":
            return completion(said)
        return calls(tool_call("send_message", message=said))

    return answer


@pytest.mark.parametrize("how", ["plain words", "send_message"])
async def test_an_echo_of_the_prompts_alerts_never_reaches_the_member(engine, fake, how):
    """SmolLM2 on llama-server began its answers with the prompt's status alert, which the
    member then saw ("[system alert] Status: 1093 of 8192 tokens in use...")."""

    fake.brain = script(
        parrot(how, lambda end: f"{end}\n\nNice to meet you, Ana!"), say("never needed")
    )
    scope = await engine.agent("t", "alice")

    exchange = await talk(engine, scope, "hello, I am Ana")

    assert "[system alert]" in _prompt_end(fake.chat_requests[0])  # what was echoed
    assert len(exchange.replies) == 1
    assert exchange.replies[0].endswith("Nice to meet you, Ana!")
    assert not re.search(r"system alert|tokens in use|Out of view", exchange.replies[0])


@pytest.mark.parametrize("how", ["plain words", "send_message"])
async def test_an_answer_that_is_only_an_echo_is_asked_again(engine, fake, how):
    only_the_alert = parrot(how, lambda end: end[end.index("[system alert]") :])
    fake.brain = script(only_the_alert, say("Hello Ana!"))
    scope = await engine.agent("t", "alice")

    exchange = await talk(engine, scope, "hello, I am Ana")

    assert exchange.replies == ["Hello Ana!"]
    told = json.dumps(fake.chat_requests[1]["messages"][-2:])
    assert ("never sees system alerts" in told) == (how == "send_message")


@pytest.mark.parametrize(
    "answer, seen",
    [
        ("[system alert] Status: 9 of 99 tokens\nOut of view: 0.\n\nHi Ana!", "Hi Ana!"),
        ("[system alert] Status: 9 of 99\r\nmore\r\n\r\nHi Ana!", "Hi Ana!"),  # CRLF
        ("Hi Ana!\n\n[SYSTEM ALERT] Summary of the 4 earlier messages", "Hi Ana!"),
        ("Before\n\n[system alert] a note\n\n\n\nAfter", "Before\n\nAfter"),
        ("Alerts are what you said?", "Alerts are what you said?"),
        ("[system alert]", ""),
    ],
)
def test_what_a_member_may_see_of_an_answer(answer, seen):
    assert for_member(answer) == seen


# --- search pagination -----------------------------------------------------------------------


async def test_conversation_search_pages(engine, fake, clock):
    fake.brain = default_brain  # echoes: "You said: ..."
    scope = await engine.agent("t", "alice")
    for n in range(6):  # 6 messages from the member, 6 replies: 12 mention tulips
        await talk(engine, scope, f"I planted tulips in bed {n}")
        clock.advance(hours=5)
    fake.requests.clear()
    fake.brain = script(
        calls(tool_call("conversation_search", query="tulips")),
        calls(tool_call("conversation_search", query="tulips", page=3)),
        say("You planted tulips six times."),
    )

    exchange = await talk(engine, scope, "what did I say about tulips?")

    first, third = (shown_results(r)[0] for r in fake.chat_requests[1:3])
    lines = first.splitlines()
    assert lines[0] == "Showing messages: page 1 of 3 (12 results)."
    assert len([line for line in lines if line.startswith("- [")]) == 5
    assert lines[-1] == "More: call again with page=2."
    lines = third.splitlines()
    assert lines[0] == "Showing messages: page 3 of 3 (12 results)."
    assert len([line for line in lines if line.startswith("- [")]) == 2
    assert "More:" not in third
    assert all("tulips" in line for line in lines[1:])
    assert "what did I say" not in first + third  # the question itself is not a result
    assert exchange.replies == ["You planted tulips six times."]


async def test_archival_insert_then_keyword_search(engine, fake, clock):
    scope = await engine.agent("t", "alice")
    fake.brain = script(
        calls(
            tool_call(
                "archival_memory_insert",
                content="Alice's sister Maya lives in Lisbon and works as a nurse.",
            )
        ),
        say("I'll keep that."),
    )
    assert (await talk(engine, scope, "my sister Maya lives in Lisbon")).replies == [
        "I'll keep that."
    ]
    assert shown_results(fake.chat_requests[1]) == ["Stored in archival memory."]

    clock.advance(days=1)
    fake.requests.clear()
    fake.brain = script(
        calls(tool_call("archival_memory_search", query="Where does Maya live?")),
        calls(tool_call("archival_memory_search", query="volcano")),
        say("Maya lives in Lisbon."),
    )
    exchange = await talk(engine, scope, "where does my sister live?")

    found, nothing = (shown_results(r)[0] for r in fake.chat_requests[1:3])
    assert found.splitlines()[0] == "Showing passages: page 1 of 1 (1 results)."
    assert "Maya lives in Lisbon and works as a nurse." in found
    assert nothing == 'Nothing matched "volcano": no passages share its words.'
    assert exchange.replies == ["Maya lives in Lisbon."]


async def test_archival_insert_then_vector_search(make_engine_for, fake):
    engine = make_engine_for(embeddings=True)
    scope = await engine.agent("t", "alice")
    facts = ["maya lives in lisbon", "the dog is called rex"]
    fake.brain = script(
        calls(*(tool_call("archival_memory_insert", content=fact) for fact in facts)),
        say("Stored both."),
    )
    await talk(engine, scope, "two facts")
    assert shown_results(fake.chat_requests[1]) == ["Stored in archival memory."] * 2
    assert [r["input"] for r in fake.embedding_requests] == [[fact] for fact in facts]

    fake.requests.clear()
    fake.brain = script(
        calls(tool_call("archival_memory_search", query="maya lisbon")),
        say("Lisbon."),
    )
    exchange = await talk(engine, scope, "where is maya?")

    assert fake.embedding_requests[-1]["input"] == ["maya lisbon"]
    result = shown_results(fake.chat_requests[1])[0]
    lines = result.splitlines()
    # The nearest passage; the other one is far in meaning and shares no word: no result.
    assert lines[0] == "Showing passages: page 1 of 1 (1 results)."
    assert "maya lives in lisbon" in lines[1]
    assert "the dog is called rex" not in result
    assert exchange.replies == ["Lisbon."]


# --- caps: on every argument, and on messages per turn ---------------------------------------


async def test_an_over_long_argument_is_refused_and_nothing_is_stored(engine, fake, sessions):
    scope = await engine.agent("t", "alice")
    huge = "word " * 60_000  # 300,000 characters, over the 200,000 a member's message may have
    fake.brain = script(
        calls(tool_call("archival_memory_insert", content=huge)),
        calls(tool_call("archival_memory_insert", content=huge[:1000])),
        say("Kept the gist."),
    )

    exchange = await talk(engine, scope, "remember all of this")

    refused, stored = (shown_results(r)[0] for r in fake.chat_requests[1:3])
    assert refused == (
        "Error: argument 'content' has 300,000 characters, over its limit of 200,000; "
        "shorten it or split it over several calls"
    )
    assert stored == "Stored in archival memory."
    async with sessions() as session:
        lengths = await session.scalars(
            select(func.length(Passage.text)).where(Passage.agent_id == scope.agent_id)
        )
        assert list(lengths) == [1000]  # the refused one left nothing behind
    assert exchange.replies == ["Kept the gist."]


def test_every_argument_of_every_function_has_a_cap():
    for fn in TOOLS:
        model = MODELS[fn.__name__]
        required = {n: "1" for n, field in model.model_fields.items() if field.is_required()}
        for name, field in model.model_fields.items():
            if field.annotation is bool:
                continue
            if field.annotation is str:
                over, says = "x" * (MAX_EVENT_CHARS + 1), f"argument '{name}' has 200,001 char"
            else:
                over, says = 10**12, f"argument '{name}' must be at most"
            with pytest.raises(ToolError) as error:
                parse_arguments(fn, json.dumps({**required, name: over}))
            assert str(error.value).startswith(says), (fn.__name__, str(error.value)[:200])


def sends(n: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda body: calls(*(tool_call("send_message", message=f"part {i}") for i in range(n)))


async def test_a_fourth_send_message_is_refused_and_ends_the_turn(engine, fake):
    fake.brain = script(sends(25), say("never asked"))
    scope = await engine.agent("t", "alice")

    exchange = await talk(engine, scope, "tell me everything")

    assert exchange.replies == ["part 0", "part 1", "part 2"]
    assert len(fake.chat_requests) == 1  # the chain ended: no step after the refusals
    # On its next turn the model sees every call answered, and why the turn ended.
    fake.brain = script(say("Sorry for the flood."))
    fake.requests.clear()
    assert (await talk(engine, scope, "wow")).replies == ["Sorry for the flood."]
    results = shown_results(fake.chat_requests[0])
    assert results[:3] == ["Sent."] * 3
    refusal = (
        "Error: not sent: you already sent 3 messages this turn, the most a turn may send; "
        "your turn ends here"
    )
    assert results[3:] == [refusal] * 22
    alerts = user_paragraphs(fake.chat_requests[0])
    assert (
        "[system alert] message limit reached: a turn may send at most 3 messages, so your "
        "turn was ended and 22 more were not sent." in alerts
    )


async def test_ten_steps_of_sends_post_three_messages_in_all(engine, fake):
    """What posted 250 messages for one member message: 10 steps of 25 sends, heartbeats on."""
    fake.brain = script(
        lambda body: calls(
            *(
                tool_call("send_message", message="again"),
                tool_call("conversation_search", query="x", request_heartbeat=True),
            )
        )
    )
    scope = await engine.agent("t", "alice")

    exchange = await talk(engine, scope, "hi")

    assert exchange.replies == ["again"] * 3
    assert len(fake.chat_requests) == 4  # the fourth step's send was refused: the chain ended


# --- what real servers send: lenient where harmless, clear where not -------------------------

LENIENT = [
    ("request_heartbeat", "true", True),
    ("request_heartbeat", "FALSE", False),
    ("page", "2", 2),
    ("page", " 3 ", 3),
    ("page", 2.0, 2),
    ("query", 42, "42"),
    ("query", 1.5, "1.5"),
    ("query", "a\u0000b", "a\ufffdb"),  # Postgres cannot store NUL
]


@pytest.mark.parametrize(("name", "sent", "taken"), LENIENT)
def test_sloppy_but_clear_arguments_are_taken(name, sent, taken):
    args = parse_arguments(conversation_search, json.dumps({"query": "tea", name: sent}))
    assert args[name] == taken and type(args[name]) is type(taken)


REFUSED = [
    ("request_heartbeat", "yes", "argument 'request_heartbeat' must be a boolean, got \"yes\""),
    ("request_heartbeat", 1, "argument 'request_heartbeat' must be a boolean, got 1"),
    ("page", 2.5, "argument 'page' must be an integer, got 2.5"),
    ("page", True, "argument 'page' must be an integer, got true"),
    ("page", "two", "argument 'page' must be an integer, got \"two\""),
    ("page", 10**30, f"argument 'page' must be at most 100,000, got {10**30}"),
    ("query", True, "argument 'query' must be a string, got true"),
    ("query", ["tea"], "argument 'query' must be a string, got [\"tea\"]"),
    ("query", None, "argument 'query' must be a string, got null"),
]


@pytest.mark.parametrize(("name", "sent", "error"), REFUSED)
def test_wrong_arguments_are_named_in_the_error(name, sent, error):
    with pytest.raises(ToolError) as raised:
        parse_arguments(conversation_search, json.dumps({"query": "tea", name: sent}))
    assert str(raised.value) == error


def test_arguments_nested_too_deeply_are_refused_cleanly():
    with pytest.raises(ToolError, match="not valid JSON"):
        parse_arguments(send_message, '{"message": ' + "[" * 100_000 + "]" * 100_000 + "}")


async def test_one_reply_is_bounded_whatever_the_model_writes(engine, fake):
    """A runaway model cannot flood a channel: a 100,000-character send_message is refused
    (the model is told the limit and may shorten it), a plain answer that long is cut."""
    huge = "The harbour light blinks twice. " * 3200
    attempts = []

    def brain(body):
        if is_summary_request(body):
            return summary_of(body)
        attempts.append(body)
        if len(attempts) == 1:
            return calls(tool_call("send_message", message=huge))
        return say("Short version: the light blinks twice.")

    fake.brain = brain
    scope = await engine.agent("t", "runaway")
    exchange = await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, "tell me all"))
    assert exchange.replies == ["Short version: the light blinks twice."]
    refusal = [m for m in attempts[1]["messages"] if m["role"] == "tool"][-1]["content"]
    assert "over its limit of 12,000" in refusal

    fake.brain = lambda body: summary_of(body) if is_summary_request(body) else completion(huge)
    plain = await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, "again"))
    (reply,) = plain.replies
    assert len(reply) <= 12_000 and reply.endswith("[… the rest was too long to send]")
