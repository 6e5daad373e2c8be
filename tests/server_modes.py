"""How real OpenAI-compatible servers differ, played by the test fake (tests/fake_openai.py).

The fake's brain always answers in OpenAI's own form; a mode changes the request the brain
sees and the answer the client gets, as that server would:

    llamacpp   a chat template that renders no tools (`template_tools` False: SmolLM2's,
               Gemma's) drops them without a word: the model never sees them and answers
               in text, and the server's prompt count leaves them out; output that does not
               parse as a call is HTTP 500 ("The model produced output that does not match
               the expected ... format"); `timings` (cache_n, prompt_n) and cached tokens
               from the prefix shared with the slot's previous prompt
    ollama     call arguments as JSON objects, no call ids, finish_reason "stop" even for
               calls, and `done_reason`
    vllm       tool_choice "auto" is HTTP 400 unless started with --enable-auto-tool-choice
               (`auto_tool_choice`)
    reasoning  (any mode) "tags": thinking in the content, in <think>...</think>; "field":
               in `reasoning_content`
    text_calls (any mode) the model writes its calls as text: "tagged"
               (<tool_call>{...}</tool_call>), "bare" (the JSON object alone), "fenced"
               (in a ```json block)
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

MALFORMED = {"malformed": True}  # a brain's answer that no tool-call parser can read
VLLM_AUTO = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
LLAMA_UNPARSED = "The model produced output that does not match the expected Hermes 2 Pro format"
THOUGHT = "Let me think about what they need. They are a member of the community."


def malformed() -> dict[str, Any]:
    return dict(MALFORMED)


def cut(answer: dict[str, Any]) -> dict[str, Any]:
    """The answer as a server sends it when it stopped at max_tokens."""
    answer["choices"][0]["finish_reason"] = "length"
    return answer


def request_for_brain(fake: Any, body: dict[str, Any]) -> dict[str, Any]:
    """What the model is shown: without the schemas where the template drops them."""
    if fake.server == "llamacpp" and not fake.template_tools and body.get("tools"):
        return {k: v for k, v in body.items() if k not in ("tools", "tool_choice")}
    return body


def refusal(fake: Any, body: dict[str, Any]) -> web.Response | None:
    if fake.server == "vllm" and body.get("tools") and not fake.auto_tool_choice:
        if body.get("tool_choice", "auto") == "auto":
            error = {
                "object": "error",
                "message": VLLM_AUTO,
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
            return web.json_response(error, status=400)
    return None


def answer_as_server(fake: Any, seen: dict[str, Any], answer: dict[str, Any]) -> web.Response:
    """The brain's answer as the configured server sends it."""
    if answer.get("malformed"):
        if fake.server == "llamacpp":
            error = {"code": 500, "message": LLAMA_UNPARSED, "type": "server_error"}
            return web.json_response({"error": error}, status=500)
        answer = _text_answer('<tool_call>{"name": send_message, oops</tool_call>')
    message = answer["choices"][0]["message"]
    if message.get("tool_calls") and not seen.get("tools"):
        _as_plain_text(answer)  # the model never saw the functions: it just talks
    if fake.text_calls and message.get("tool_calls"):
        _calls_as_text(answer, fake.text_calls)
    if fake.reasoning == "tags":
        message["content"] = f"<think>{THOUGHT}</think>\n" + (message.get("content") or "")
    elif fake.reasoning == "field":
        message["reasoning_content"] = THOUGHT
    if fake.server == "ollama":
        _as_ollama(answer)
    return web.json_response(answer)


def llamacpp_timings(prompt_n: int, cached: int) -> dict[str, Any]:
    return {
        "cache_n": cached,
        "prompt_n": prompt_n - cached,
        "prompt_ms": 1.0,
        "predicted_n": 10,
        "predicted_ms": 1.0,
    }


def _text_answer(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-text",
        "object": "chat.completion",
        "created": 0,
        "model": "fake",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
    }


def _as_plain_text(answer: dict[str, Any]) -> None:
    choice = answer["choices"][0]
    message = choice["message"]
    said = []
    for call in message.pop("tool_calls"):
        try:
            said.append(str(json.loads(call["function"]["arguments"]).get("message", "")))
        except (ValueError, AttributeError):
            pass
    message["content"] = " ".join(s for s in said if s) or message.get("content") or "OK."
    choice["finish_reason"] = "stop"


def _calls_as_text(answer: dict[str, Any], form: str) -> None:
    message = answer["choices"][0]["message"]
    calls = message.pop("tool_calls")
    objects = [
        {"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
        for c in calls
    ]
    if form == "tagged":
        text = "".join(f"<tool_call>\n{json.dumps(o)}\n</tool_call>" for o in objects)
        message["content"] = (message.get("content") or "") + text
    elif form == "fenced":
        message["content"] = f"```json\n{json.dumps(objects[0], indent=2)}\n```"
    else:
        message["content"] = json.dumps(objects[0])
    answer["choices"][0]["finish_reason"] = "stop"


def _as_ollama(answer: dict[str, Any]) -> None:
    choice = answer["choices"][0]
    for call in choice["message"].get("tool_calls") or ():
        call.pop("id", None)
        call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    choice["done_reason"] = choice.pop("finish_reason", "stop")
    if choice["done_reason"] == "tool_calls":
        choice["done_reason"] = "stop"
