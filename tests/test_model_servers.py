"""Real model servers, as the test fake plays them (tests/server_modes.py): each finding of
the real-servers issue, reproduced, and each server's ways, through `companion chat` and
through Slack.

Every test here (and in the whole suite) runs on the strict fake: a request that OpenAI's
rules or the strictest chat templates refuse is answered with their 400 (tests/wire_rules).
"""

from __future__ import annotations

import json
import logging

import pytest
from aiohttp import web

from adapters.common import Services
from core.config import EngineConfig
from core.members.portability import parse_export
from core.memory.turn import CUT_CALL_NOTE, CUT_MARK, MALFORMED_NOTE
from core.runtime.apologies import MODEL_DOWN_REPLY, MODEL_SETUP_REPLY, WAITING_NOTICE
from core.scope import Scope
from core.wire.health import SILENT_TURNS
from tests.conftest import cli_env, run_cli
from tests.fake_openai import (
    FakeOpenAI,
    calls,
    completion,
    default_brain,
    is_summary_request,
    say,
    summary_of,
    tool_call,
)
from tests.fake_slack import TEAM
from tests.rigs import slack_message, slack_rig
from tests.server_modes import THOUGHT, VLLM_AUTO, cut, malformed
from tests.wire_rules import GEMMA_ALTERNATE, template_refusal


def script(*answers):
    """The n-th chat request gets the n-th answer (the last from then on)."""
    seen: list[dict] = []

    def brain(body):
        if is_summary_request(body):
            return summary_of(body)
        seen.append(body)
        answer = answers[min(len(seen), len(answers)) - 1]
        return answer(body) if callable(answer) else answer

    return brain


async def talk(engine, scope: Scope, text: str):
    from core.events import EventKind, InboundEvent

    return await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, text))


# --- 2. strict templates: no two user messages in a row, ever ------------------------------


async def test_a_strict_template_answers_every_turn_of_a_conversation_with_calls(engine, fake):
    """Mistral's and Gemma's templates refused every prompt Companion sent (the member's
    message, then the status as a second user message). Now a conversation that saves,
    searches and answers across turns is taken whole, and each prompt ends with one user
    message carrying the status (or a function result carrying it)."""
    fake.server = "llamacpp"
    scope = await engine.agent("t", "alice")
    for text in ("hello", "remember that my cat is called Miso", "what did I say about cat?"):
        exchange = await talk(engine, scope, text)
        assert exchange.result and exchange.result.error is None, exchange
    assert fake.refusals == []
    for body in fake.chat_requests:
        roles = [m["role"] for m in body["messages"]]
        assert roles[-1] in ("user", "tool") and roles[-2:] != ["user", "user"]
        assert "[system alert] Status:" in body["messages"][-1]["content"]
        assert template_refusal(body) is None


async def test_llamacpps_prompt_cache_serves_nearly_every_call_of_a_turn(engine, fake):
    """llama.cpp keeps the slot's previous prompt and reports how much of the next it reused
    (`timings.cache_n`, `cached_tokens`): with the status inside the last message, each call
    of a chain repeats nearly all of the previous one."""
    fake.server = "llamacpp"
    scope = await engine.agent("t", "alice")
    for text in ("hello", "remember that my cat is called Miso", "what do you know about me?"):
        exchange = await talk(engine, scope, text)
    calls_made = [call for call in exchange.result.calls if call.purpose == "chat"]
    assert calls_made and all(c.cached_tokens >= 0.9 * c.prompt_tokens for c in calls_made)


async def test_a_server_without_a_system_role_is_asked_again_without_one_and_remembered(
    engine, fake
):
    """Gemma's template under vLLM: "System role not supported". The instructions move into
    the first user message, for this request and every later one."""
    fake.system_role = False
    scope = await engine.agent("t", "alice")
    first = await talk(engine, scope, "hello")
    second = await talk(engine, scope, "still there?")
    assert first.replies[0].endswith("hello") and second.replies == ["You said: still there?"]
    assert fake.refusals == ["System role not supported"]  # once, then never again
    last = fake.chat_requests[-1]["messages"]
    assert last[0]["role"] == "user" and "long-term memory" in last[0]["content"]


async def test_a_template_without_function_messages_gets_calls_and_results_as_words(engine, fake):
    """Gemma 2's template knows no function messages and counts every message in its
    alternation: after one refusal, calls and results go as the agent's and the user's
    words, and every turn, with a history full of calls, is answered."""
    fake.every_message = True
    scope = await engine.agent("t", "alice")
    for text in ("remember that my cat is called Miso", "what do you know about me?", "bye"):
        exchange = await talk(engine, scope, text)
        assert exchange.result and exchange.result.error is None
    assert fake.refusals == [GEMMA_ALTERNATE]
    last = fake.chat_requests[-1]["messages"]
    assert not any(m["role"] == "tool" or m.get("tool_calls") for m in last)
    assert "[called core_memory_append(" in json.dumps(last)
    assert "my cat is called Miso" in exchange.replies[0] or "Miso" in json.dumps(last)


# --- 3. members never see a server's internals ------------------------------------------------

TEMPLATE_ERROR = (
    "Unable to generate parser for this template. Automatic parser generation failed: \n"
    "------------\nWhile executing CallExpression at line 9, column 12 in source:\n"
    "...{{- raise_exception('Unexpected message role.') }}\nError: Jinja Exception: "
    "Unexpected message role."
)


async def test_a_refusal_that_will_repeat_is_a_setup_error_logged_once_with_its_fix(
    engine, fake, caplog
):
    fake.fail_next(400, json.dumps({"error": {"code": 400, "message": TEMPLATE_ERROR}}), times=2)
    scope = await engine.agent("t", "alice")
    with caplog.at_level(logging.WARNING):
        first = await talk(engine, scope, "hello")
        second = await talk(engine, scope, "hello again")
    for exchange in (first, second):
        assert exchange.replies == [MODEL_SETUP_REPLY]
        assert "Jinja" not in exchange.replies[0] and "try again" not in exchange.replies[0]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "Jinja Exception" in errors[0].getMessage()
    assert "--chat-template-file" in errors[0].getMessage()  # the fix, named
    state, detail = engine.mind.health.state()
    assert state == "refused" and "--chat-template-file" in detail
    await talk(engine, scope, "and now?")  # the endpoint takes requests again
    assert engine.mind.health.state()[0] == "ok"


async def test_an_outage_gets_a_kind_notice_without_the_servers_words(make_engine_for, fake):
    engine = make_engine_for(retries=1)
    body = json.dumps({"error": {"message": "upstream connect error\nstack: at foo.py:12"}})
    fake.fail_next(503, body, times=2)
    scope = await engine.agent("t", "alice")
    exchange = await talk(engine, scope, "hello")
    assert exchange.replies == [WAITING_NOTICE]  # the message waits for the model
    assert len(fake.requests) == 2  # retried once, as configured, then it is down


# --- 4. output budget, sampling and timeouts ------------------------------------------------


async def test_the_output_budget_and_sampling_reach_the_server(make_engine_for, fake):
    from core.llm import Generation

    engine = make_engine_for(EngineConfig(reply_reserve=200))
    engine.mind.model.generation = Generation(temperature=0.3, top_p=0.9)
    scope = await engine.agent("t", "alice")
    await talk(engine, scope, "hello")
    (body,) = fake.chat_requests
    assert body["max_tokens"] == 200 and body["temperature"] == 0.3 and body["top_p"] == 0.9


async def test_a_timed_out_generation_is_asked_again_at_most_once_per_turn(make_engine_for, fake):
    """A CPU server that takes longer than the timeout: the client used to retry from
    scratch up to three times (each regenerating everything). Now: once; then the endpoint
    counts as down and the message waits for it (tests/test_outage.py)."""
    engine = make_engine_for(retries=3, timeout=0.3)
    fake.delay = 1.0
    scope = await engine.agent("t", "alice")
    exchange = await talk(engine, scope, "hello")
    assert len(fake.chat_requests) == 2
    assert exchange.replies == [WAITING_NOTICE]


# --- 5. finish_reason: a cut call is not run, a cut reply says so -----------------------------


async def test_a_call_cut_at_the_output_limit_is_not_run_and_the_model_is_told(
    engine, fake, members
):
    fake.server = "llamacpp"
    fake.brain = script(
        cut(calls(tool_call("core_memory_append", label="human", content="My cat is Mi"))),
        say("Sorry, let me answer briefly."),
    )
    scope = await engine.agent("t", "alice")
    exchange = await talk(engine, scope, "remember my cat Miso")
    assert exchange.replies == ["Sorry, let me answer briefly."]
    view = await members.view("t", "alice")
    assert view and "My cat is Mi" not in json.dumps(view.blocks)  # the cut call never ran
    assert CUT_CALL_NOTE in json.dumps(fake.chat_requests[1]["messages"])


async def test_a_text_reply_cut_at_the_output_limit_is_marked(engine, fake):
    fake.brain = script(cut(completion("Here is a long story about your cat that goes on and")))
    scope = await engine.agent("t", "alice")
    (reply,) = (await talk(engine, scope, "tell me a story")).replies
    assert reply.endswith(CUT_MARK)


# --- 6. output the server could not read: the model is told, once ----------------------------


async def test_llamacpps_500_for_unreadable_output_goes_back_to_the_model_once(engine, fake):
    fake.server = "llamacpp"
    fake.brain = script(malformed(), say("Here I am."))
    scope = await engine.agent("t", "alice")
    exchange = await talk(engine, scope, "hello")
    assert exchange.replies == ["Here I am."]
    assert len(fake.chat_requests) == 2  # no blind retries of the 500
    assert MALFORMED_NOTE in json.dumps(fake.chat_requests[1]["messages"])


@pytest.mark.parametrize(
    "server, wording",
    [
        ("llamacpp", "Failed to parse input at pos 0: {raw}"),
        ("ollama", "error parsing tool call: raw='{raw}', err=unexpected end of JSON input"),
    ],
)
async def test_a_parse_error_with_the_models_output_is_unreadable_output_not_logged(
    engine, fake, caplog, server, wording
):
    """Newer llama.cpp answers a call it cannot parse with HTTP 500 "Failed to parse input
    at pos N: " and the model's raw output, Ollama with "error parsing tool call: raw=...":
    either may hold the member's words. The model is told, as for llama.cpp's older
    wording, the endpoint is not taken for down, and the output is not logged."""
    raw = "<tool_call>[remember(fact='my PIN is 4417')]</tool_call>"
    error = {"code": 500, "message": wording.format(raw=raw)}
    fake.server = server
    fake.brain = script(web.json_response({"error": error}, status=500), say("Here I am."))
    scope = await engine.agent("t", "alice")
    caplog.set_level(logging.INFO)

    exchange = await talk(engine, scope, "my PIN is 4417, remember it")

    assert exchange.replies == ["Here I am."]
    assert len(fake.chat_requests) == 2
    assert MALFORMED_NOTE in json.dumps(fake.chat_requests[1]["messages"])
    assert engine.mind.health.outage.down_since is None
    assert not [r for r in caplog.records if "4417" in r.getMessage()]


async def test_unreadable_output_twice_gives_the_apology(engine, fake):
    fake.server = "llamacpp"
    fake.brain = script(malformed())
    scope = await engine.agent("t", "alice")
    exchange = await talk(engine, scope, "hello")
    assert exchange.replies == [MODEL_DOWN_REPLY] and len(fake.chat_requests) == 2


# --- 7. whatever the database holds, the request is one every server takes ------------------


async def test_an_import_with_a_result_answering_no_call_and_a_call_never_answered(
    engine, fake, members
):
    """Such an export was imported and then sent as it was: OpenAI answers 400 to every
    turn of that member, for good. Now the request is repaired on the way out."""
    scope = await engine.agent("t", "alice")
    await talk(engine, scope, "hello")
    export = await members.export("t", "alice")
    at = "2026-03-01T11:00:00+00:00"
    export["messages"] = [
        {"role": "user", "content": "an old question", "created_at": at, "in_context": True},
        {"role": "tool", "content": "a result of nothing", "tool_call_id": "ghost",
         "created_at": at, "in_context": True},
        {"role": "assistant", "content": None, "created_at": at, "in_context": True,
         "tool_calls": [{"id": "call_lost", "type": "function",
                         "function": {"name": "send_message", "arguments": '{"message": "hi"}'}}]},
    ]  # fmt: skip
    await members.admin_import("t", "operator", "alice", parse_export(export), True)
    exchange = await talk(engine, scope, "are you there?")
    assert exchange.replies == ["You said: are you there?"]
    assert fake.refusals == []
    sent = json.dumps(fake.chat_requests[-1]["messages"])
    assert "a result of nothing" in sent  # kept, as an alert the agent can read


async def test_imported_past_sessions_are_counted_out_of_view_in_the_status(engine, fake, members):
    """`companion eval` imports past sessions out of context, without a summary; the status
    told the agent "0 older messages in recall storage", so it had no reason to search."""
    scope = await engine.agent("t", "alice")
    export = await members.export("t", "alice")
    at = "2026-02-01T10:00:00+00:00"
    export["messages"] = [
        {"role": "user", "content": f"an old session, line {n}", "created_at": at} for n in range(5)
    ]
    await members.admin_import("t", "operator", "alice", parse_export(export), True)
    await talk(engine, scope, "do you remember our old talks?")
    status = fake.chat_requests[-1]["messages"][-1]["content"]
    assert "Out of view: 5 older messages in recall storage" in status


# --- 1. tools dropped without a word: told at run time and by doctor -------------------------


async def test_a_server_that_drops_the_functions_is_named_once_at_run_time(engine, fake, caplog):
    """llama.cpp with a template that renders no tools answered every turn as a plain
    chatbot and nothing said so. Its prompt counts miss the schemas: one warning."""
    fake.server, fake.template_tools = "llamacpp", False
    scope = await engine.agent("t", "alice")
    with caplog.at_level(logging.WARNING, logger="companion.model"):
        for n in range(4):
            exchange = await talk(engine, scope, f"remember that I like tea number {n}")
            assert exchange.replies  # still answered, in plain text
    warnings = [r.getMessage() for r in caplog.records if r.name == "companion.model"]
    assert len(warnings) == 1 and "drop the function schemas" in warnings[0]
    assert "--jinja" in warnings[0]
    assert engine.mind.health.state()[0] == "no_functions"


async def test_a_model_that_never_calls_a_function_is_named_too(engine, fake, caplog):
    fake.brain = script(completion("Just chatting."))
    scope = await engine.agent("t", "alice")
    with caplog.at_level(logging.WARNING, logger="companion.model"):
        for n in range(SILENT_TURNS):
            await talk(engine, scope, f"hi {n}")
    warnings = [r.getMessage() for r in caplog.records if r.name == "companion.model"]
    assert len(warnings) == 1 and "no function" in warnings[0]


async def doctor(fake, pg_url, schema) -> str:
    run = await run_cli(cli_env(fake, pg_url, schema), "doctor")
    return run.out


async def test_doctor_names_a_template_that_drops_the_functions(fake, pg_url, schema):
    fake.server, fake.template_tools = "llamacpp", False
    out = await doctor(fake, pg_url, schema)
    (line,) = [x for x in out.splitlines() if "functions" in x]
    assert line.startswith("FAIL") and "--jinja" in line and "--chat-template-file" in line


async def test_doctor_names_vllms_tool_choice_flags(fake, pg_url, schema):
    fake.server, fake.auto_tool_choice = "vllm", False
    out = await doctor(fake, pg_url, schema)
    (line,) = [x for x in out.splitlines() if "functions" in x]
    assert line.startswith("FAIL") and "--enable-auto-tool-choice" in line


async def test_doctor_says_ok_when_the_endpoint_calls_functions(fake, pg_url, schema):
    fake.brain = lambda body: (
        calls(tool_call("record_ok", ok=True)) if body.get("tools") else completion("ok")
    )
    out = await doctor(fake, pg_url, schema)
    (line,) = [x for x in out.splitlines() if "functions" in x]
    assert line.startswith("ok") and "calls functions" in line


# --- each server's ways, through `companion chat` and through Slack ---------------------------

MODES = {
    "llamacpp": {"server": "llamacpp"},
    "ollama": {"server": "ollama"},
    "vllm": {"server": "vllm"},
    "think-tags": {"reasoning": "tags"},
    "reasoning-field": {"reasoning": "field"},
    "calls-in-tool_call-tags": {"text_calls": "tagged"},
    "calls-as-bare-json": {"text_calls": "bare"},
    "calls-in-a-fenced-block": {"text_calls": "fenced"},
}


def play(fake: FakeOpenAI, mode: dict) -> None:
    for name, value in mode.items():
        setattr(fake, name, value)


@pytest.mark.parametrize("mode", list(MODES.values()), ids=list(MODES))
async def test_each_server_through_companion_chat(fake, pg_url, schema, mode):
    """Memory works through each server's ways: the fact is saved by a function call and
    recalled; no thinking and no server text reaches the member."""
    play(fake, mode)
    env = cli_env(fake, pg_url, schema)
    lines = "remember that my cat is called Miso\nwhat do you know about me?\n"
    run = await run_cli(env, "chat", "--user", "ana", stdin=lines)
    assert run.code == 0, run
    first, rest = run.out.split("\n", 1)
    assert first == "Got it, I'll remember that."
    assert rest.startswith("I know this:") and "my cat is called Miso" in rest
    assert THOUGHT not in run.out and "<think>" not in run.out and "tool_call" not in run.out
    assert fake.refusals == []


@pytest.mark.parametrize("mode", list(MODES.values()), ids=list(MODES))
async def test_each_server_through_slack(engine, members, fake, mode):
    play(fake, mode)
    async with slack_rig(Services(engine, members), users=("U1",)) as slack:
        await slack.dispatch(slack_message(text="remember that my cat is called Miso"))
        await slack.dispatch(slack_message(text="what do you know about me?"))
        texts = [post["text"] for post in slack.posted()]
    assert texts[0] == "Got it, I'll remember that."
    assert "my cat is called Miso" in texts[1]
    assert not any(THOUGHT in t or "<think>" in t for t in texts)
    stored = json.dumps(await members.export(f"slack:{TEAM}", "U1"))
    assert THOUGHT not in stored  # nor stored as anything the agent said


async def test_vllm_without_auto_tool_choice_is_a_setup_error_through_slack(engine, members, fake):
    fake.server, fake.auto_tool_choice = "vllm", False
    async with slack_rig(Services(engine, members), users=("U1",)) as slack:
        await slack.dispatch(slack_message(text="hello"))
        (post,) = slack.posted()
    assert post["text"] == MODEL_SETUP_REPLY and VLLM_AUTO not in post["text"]
    state, detail = engine.mind.health.state()
    assert state == "refused" and "--enable-auto-tool-choice" in detail


async def test_ollamas_calls_without_ids_and_with_object_arguments_are_paired(engine, fake):
    fake.server = "ollama"
    fake.brain = default_brain
    scope = await engine.agent("t", "alice")
    await talk(engine, scope, "remember that I like tea")
    await talk(engine, scope, "what do you know about me?")
    last = fake.chat_requests[-1]["messages"]
    calls_sent = [m for m in last if m.get("tool_calls")]
    assert calls_sent and all(len(m["tool_calls"][0]["id"]) == 9 for m in calls_sent)
    assert fake.refusals == []
