"""The wire's one shape (core.wire.shape): whatever messages a prompt is built from, the
request is one that OpenAI's rules and the strictest chat templates accept (tests/wire_rules,
written apart from the product), and nothing the agent should read is lost on the way."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from core.wire.shape import call_id, carry, conform, function_name
from tests.wire_rules import openai_refusal, template_refusal

TAIL = "[system alert] Status: 900 of 8192 tokens in use."


def request(messages: list[dict]) -> dict:
    return {"model": "gpt-4o-mini", "messages": messages, "tools": TOOLS, "tool_choice": "auto"}


TOOLS = [{"type": "function", "function": {"name": "send_message", "parameters": {}}}]


def accepted(messages: list[dict]) -> None:
    body = request(messages)
    assert openai_refusal(body) is None, (openai_refusal(body), messages)
    assert template_refusal(body) is None, (template_refusal(body), messages)


def call(id_: str, name: str = "send_message", arguments: str = '{"message": "hi"}') -> dict:
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_every_prompt_ended_by_the_status_as_its_own_user_message_is_refused_as_it_was():
    """What Companion sent before: the member's message, then the status, two user messages
    in a row: a strict template refuses it; conformed, the status rides in the message."""
    before = [
        {"role": "system", "content": "You are a companion."},
        {"role": "user", "content": "hello"},
        {"role": "user", "content": TAIL},
    ]
    assert template_refusal(request(before)) is not None
    shaped = carry(conform(before[:-1]).messages, TAIL)
    accepted(shaped)
    assert shaped[-1] == {"role": "user", "content": f"hello\n\n{TAIL}"}


def test_a_chain_of_calls_is_one_call_per_message_each_answered_at_once_with_the_status_inside():
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "remember my cat Miso"},
        {
            "role": "assistant",
            "content": "saving",
            "tool_calls": [call("call_a", "core_memory_append"), call("call_b")],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "OK"},
        {"role": "tool", "tool_call_id": "call_b", "content": "Sent."},
    ]
    shaped = carry(conform(messages).messages, TAIL)
    accepted(shaped)
    assert [m["role"] for m in shaped] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    assert shaped[2]["content"] == "saving" and shaped[4]["content"] == ""
    assert shaped[3]["tool_call_id"] == shaped[2]["tool_calls"][0]["id"]
    assert shaped[5]["content"] == f"Sent.\n\n{TAIL}"


def test_the_next_turn_after_a_sent_message_gets_an_empty_answer_between_the_persons_words():
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [call("call_1")]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sent."},
        {"role": "user", "content": "how are you"},
    ]
    shaped = carry(conform(messages).messages, TAIL)
    accepted(shaped)
    assert shaped[3] == {"role": "assistant", "content": ""}


def test_damaged_history_is_repaired_and_counted():
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "tool", "tool_call_id": "lost", "content": "an orphan result"},
        {"role": "assistant", "content": None, "tool_calls": [call("x1", "bad name!")]},
        {"role": "user", "content": "anyone?"},
    ]
    shaped = conform(messages)
    accepted(shaped.messages)
    assert shaped.repairs == {"orphan_result": 1, "unanswered_call": 1, "bad_name": 1}
    text = json.dumps(shaped.messages)
    assert "an orphan result" in text and "bad_name" in text
    assert shaped.added > 0


def test_ids_are_nine_letters_and_digits_and_the_same_for_the_same_history():
    assert call_id("call_abc") == call_id("call_abc") != call_id("call_abd")
    assert len(call_id("call_abc")) == 9 and call_id("call_abc").isalnum()
    assert call_id("A1b2C3d4E") == "A1b2C3d4E"  # already fine: kept
    assert call_id("call_0", 0) != call_id("call_0", 1)
    assert function_name("send message") == "send_message"
    assert function_name("!!!") == "unnamed_function"


# --- a seeded campaign over any history ---------------------------------------------------

ROLE = st.sampled_from(["user", "assistant", "assistant_calls", "tool", "system", "weird"])
IDS = st.sampled_from(["call_1", "call_2", "c", "", "A1b2C3d4E", "call_1"])
NAMES = st.sampled_from(["send_message", "conversation_search", "bad name", "", "x" * 80])
TEXT = st.one_of(st.none(), st.just(""), st.text(max_size=20))


@st.composite
def messages(draw: st.DrawFn) -> list[dict]:
    out: list[dict] = []
    if draw(st.booleans()):
        out.append({"role": "system", "content": draw(TEXT)})
    for _ in range(draw(st.integers(0, 12))):
        role = draw(ROLE)
        if role == "assistant_calls":
            calls = [
                call(draw(IDS), draw(NAMES), draw(st.sampled_from(["{}", '{"a": 1}', "oops"])))
                for _ in range(draw(st.integers(1, 3)))
            ]
            out.append({"role": "assistant", "content": draw(TEXT), "tool_calls": calls})
        elif role == "tool":
            out.append({"role": "tool", "tool_call_id": draw(IDS), "content": draw(TEXT)})
        else:
            out.append({"role": role, "content": draw(TEXT)})
    return out


@given(messages(), st.booleans())
def test_any_history_conforms_to_a_request_every_server_accepts(history, with_tail):
    shaped = conform(history).messages
    assert conform(shaped).messages == shaped  # a conformed prompt stays as it is
    if with_tail:
        shaped = carry(shaped, TAIL)
    if not shaped:
        return
    accepted(shaped)
    if with_tail:
        assert TAIL in str(shaped[-1]["content"])
        assert shaped[-1]["role"] in ("user", "tool")
    # Nothing the agent said or heard is dropped: every text survives somewhere.
    text = json.dumps(shaped, ensure_ascii=False)
    for message in history:
        content = message.get("content")
        if isinstance(content, str) and content.strip():
            assert json.dumps(content, ensure_ascii=False)[1:-1] in text


@given(messages())
def test_a_longer_history_conforms_to_a_longer_prompt_with_the_same_start(history):
    """What the prompt cache needs: the shape of a prefix is kept when messages are added
    (all but the last message and its neighbours, where merges and the tail happen)."""
    shorter = conform(history[:-2]).messages
    longer = conform(history).messages
    stable = max(len(shorter) - 2, 0)
    assert longer[:stable] == shorter[:stable]
