"""What real chat servers refuse, written apart from the product's own shaping (core.wire).

`openai_refusal(body)` checks a chat-completions request against OpenAI's published rules
and returns OpenAI's own 400 error object for the first rule it breaks (or None):
parameters, roles, content types, function names and ids, and the pairing of calls and
results ("messages with role 'tool' must be a response to a preceeding message with
'tool_calls'", "An assistant message with 'tool_calls' must be followed by tool messages
responding to each 'tool_call_id'"). Reasoning models refuse `max_tokens`.

`template_refusal(body)` returns the exception the strictest mainstream chat templates
raise (as llama.cpp and vLLM render them), or None:
  Mistral's    plain user/assistant messages alternate after an optional system message,
               counting neither calls nor results; call ids of exactly 9 letters/digits
  Llama 3's    one call per assistant message
  llama.cpp's, vLLM's   a call's arguments in the history parse as a JSON object
  MiniMax's, gpt-oss's   a tool message needs a previous assistant message with a call
  Llama 3's    the first message after the system message is the person's
  Gemma's      no system role (only when `system_role` is False); Gemma 2's also counts
               every message in the alternation and knows no function messages (only when
               `every_message` is True)

The test fake refuses what either refuses, so no test passes on a prompt a real server
would refuse.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

KNOWN_PARAMS = {
    "model", "messages", "tools", "tool_choice", "parallel_tool_calls", "max_tokens",
    "max_completion_tokens", "temperature", "top_p", "n", "stream", "stream_options", "stop",
    "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "user",
    "seed", "response_format", "prompt_cache_key", "safety_identifier", "reasoning_effort",
    "service_tier", "store", "metadata", "modalities", "audio", "prediction", "verbosity",
    "web_search_options", "functions", "function_call",
}  # fmt: skip
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_CONTENT = 10_485_760
REASONING_MODEL = re.compile(r"^(o\d|gpt-5)")


def _error(message: str, param: str | None, code: str | None = None) -> dict[str, Any]:
    return {"message": message, "type": "invalid_request_error", "param": param, "code": code}


def _has_lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any(0xD800 <= ord(ch) <= 0xDFFF for ch in value)
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


def unparseable(body: Any) -> bool:
    """What OpenAI cannot parse as a request: not an object, or lone surrogates in it."""
    return not isinstance(body, dict) or _has_lone_surrogate(body)


PARSE_ERROR = _error(
    "We could not parse the JSON body of your request. (HINT: This likely means you aren't "
    "using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was "
    "sent was not valid JSON.)",
    None,
)


def openai_refusal(body: dict[str, Any]) -> dict[str, Any] | None:
    """OpenAI's 400 error object for the first rule `body` breaks, or None."""
    for name in sorted(body.keys() - KNOWN_PARAMS):
        return _error(f"Unrecognized request argument supplied: {name}", None)
    if not isinstance(body.get("model"), str) or not body["model"]:
        return _error("you must provide a model parameter", None)
    for check in (_parameters, _tools, _messages, _pairing):
        refusal = check(body)
        if refusal:
            return refusal
    return None


def _parameters(body: dict[str, Any]) -> dict[str, Any] | None:
    if "tool_choice" in body and not body.get("tools"):
        return _error(
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are "
            "specified.",
            "tool_choice",
        )
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            return _error(f"Invalid type for '{name}': expected an integer.", name)
        if value < 1:
            return _error(
                f"Invalid '{name}': integer below minimum value. Expected a value >= 1, but "
                f"got {value} instead.",
                name,
                "integer_below_min_value",
            )
    if "max_tokens" in body and REASONING_MODEL.match(str(body["model"])):
        return _error(
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
            "'max_completion_tokens' instead.",
            "max_tokens",
            "unsupported_parameter",
        )
    return None


def _tools(body: dict[str, Any]) -> dict[str, Any] | None:
    tools = body.get("tools")
    if tools is None:
        return None
    if not isinstance(tools, list) or not tools:
        return _error(
            "Invalid 'tools': empty array. Expected an array with minimum length 1.", "tools"
        )
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or tool.get("type") != "function":
            return _error(
                f"Missing required parameter: 'tools[{i}].function'.", f"tools[{i}].function"
            )
        name = function.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            return _error(
                f"Invalid 'tools[{i}].function.name': string does not match pattern. Expected a "
                "string that matches the pattern '^[a-zA-Z0-9_-]+$'.",
                f"tools[{i}].function.name",
                "invalid_value",
            )
    return None


def _content_refusal(i: int, message: dict[str, Any], required: bool) -> dict[str, Any] | None:
    content = message.get("content")
    param = f"messages[{i}].content"
    if content is None:
        if required:
            return _error("Invalid value for 'content': expected a string, got null.", param)
        return None
    if isinstance(content, str):
        if len(content) > MAX_CONTENT:
            return _error(
                f"Invalid '{param}': string too long. Expected a string with maximum length "
                f"{MAX_CONTENT}, but got a string with length {len(content)} instead.",
                param,
                "string_above_max_length",
            )
        return None
    if isinstance(content, list) and content:
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            allowed = ("text", "image_url") if message["role"] == "user" else ("text",)
            if kind not in allowed:
                return _error(
                    f"Invalid value: '{kind}'. Supported values are: {allowed}.",
                    f"{param}[{j}].type",
                )
            refusal = _part_refusal(f"{param}[{j}]", part)
            if refusal:
                return refusal
        return None
    return _error(f"Invalid type for '{param}': expected one of a string or array.", param)


IMAGE_FORMATS = {"png": b"\x89PNG", "jpeg": b"\xff\xd8\xff", "gif": b"GIF8", "webp": b"RIFF"}
DATA_URL = re.compile(r"data:image/([a-z]+);base64,([A-Za-z0-9+/]*={0,2})")
MAX_IMAGE_BYTES = 20 * 1024 * 1024
UNSUPPORTED_IMAGE = (
    "You uploaded an unsupported image. Please make sure your image has of one the following "
    "formats: ['png', 'jpeg', 'gif', 'webp']."
)


def _part_refusal(param: str, part: dict[str, Any]) -> dict[str, Any] | None:
    """OpenAI's rules for one content part: a text part's `text`; an image part's
    `image_url.url` (https, or a base64 data URL of a PNG, JPEG, GIF or WebP that is what
    it says, at most 20 MB) and `detail` (auto, low, high)."""
    if part["type"] == "text":
        if not isinstance(part.get("text"), str):
            return _error(f"Missing required parameter: '{param}.text'.", f"{param}.text")
        return None
    image = part.get("image_url")
    if not isinstance(image, dict) or not isinstance(image.get("url"), str):
        return _error(f"Missing required parameter: '{param}.image_url'.", f"{param}.image_url")
    detail = image.get("detail", "auto")
    if detail not in ("auto", "low", "high"):
        return _error(
            f"Invalid value: '{detail}'. Supported values are: 'auto', 'low', and 'high'.",
            f"{param}.image_url.detail",
        )
    url = image["url"]
    if url.startswith("https://"):
        return None
    found = DATA_URL.fullmatch(url)
    if found is None:
        return _error(
            "Invalid image URL: the URL must be https or a base64 data URL.",
            f"{param}.image_url.url",
            "invalid_image_url",
        )
    try:
        data = base64.b64decode(found.group(2), validate=True)
    except ValueError:
        return _error("Invalid base64 image data.", f"{param}.image_url.url", "invalid_image")
    magic = IMAGE_FORMATS.get(found.group(1))
    if magic is None or not data.startswith(magic):
        return _error(UNSUPPORTED_IMAGE, f"{param}.image_url.url", "invalid_image_format")
    if len(data) > MAX_IMAGE_BYTES:
        return _error("Image too large: the limit is 20 MB.", f"{param}.image_url.url")
    return None


def images_in(body: dict[str, Any]) -> list[tuple[str, bytes]]:
    """Every image of a request, as (param, bytes); https images as (param, b"")."""
    found = []
    for i, message in enumerate(body.get("messages") or []):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") == "image_url":
                url = part["image_url"]["url"]
                data = DATA_URL.fullmatch(url)
                raw = base64.b64decode(data.group(2)) if data else b""
                found.append((f"messages.[{i}].content.[{j}].type", raw))
    return found


def _messages(body: dict[str, Any]) -> dict[str, Any] | None:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return _error("[] is too short - 'messages'", "messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            return _error(
                f"Invalid type for 'messages[{i}]': expected an object.", f"messages[{i}]"
            )
        role = message.get("role")
        if role not in ROLES:
            return _error(
                f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', "
                "'user', 'function', 'tool', and 'developer'.",
                f"messages[{i}].role",
            )
        calls = message.get("tool_calls")
        refusal = _content_refusal(i, message, required=not (role == "assistant" and calls))
        if refusal:
            return refusal
        if role == "tool" and not isinstance(message.get("tool_call_id"), str):
            return _error(
                f"Missing required parameter: 'messages[{i}].tool_call_id'.",
                f"messages[{i}].tool_call_id",
            )
        if calls is not None:
            refusal = _calls_refusal(i, role, calls)
            if refusal:
                return refusal
    return None


def _calls_refusal(i: int, role: str, calls: Any) -> dict[str, Any] | None:
    param = f"messages[{i}].tool_calls"
    if role != "assistant":
        return _error(f"Unrecognized parameter: '{param}'.", param)
    if not isinstance(calls, list) or not calls:
        return _error(
            f"Invalid '{param}': empty array. Expected an array with minimum length 1.", param
        )
    for j, call in enumerate(calls):
        where = f"{param}[{j}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or call.get("type") != "function":
            return _error(f"Missing required parameter: '{where}.function'.", f"{where}.function")
        if not isinstance(call.get("id"), str) or not call["id"]:
            return _error(f"Missing required parameter: '{where}.id'.", f"{where}.id")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            return _error(
                f"Invalid '{where}.function.name': empty string. Expected a string with minimum "
                "length 1, but got an empty string instead.",
                f"{where}.function.name",
                "empty_string",
            )
        if not NAME.match(name):
            return _error(
                f"Invalid '{where}.function.name': string does not match pattern. Expected a "
                "string that matches the pattern '^[a-zA-Z0-9_-]{1,64}$'.",
                f"{where}.function.name",
                "invalid_value",
            )
        if not isinstance(function.get("arguments"), str):
            return _error(
                f"Invalid type for '{where}.function.arguments': expected a string, but got an "
                "object instead.",
                f"{where}.function.arguments",
                "invalid_type",
            )
    return None


def _pairing(body: dict[str, Any]) -> dict[str, Any] | None:
    """Every result answers a call of the assistant message before it; every call answered."""
    open_ids: list[str] | None = None  # calls of the last assistant message, not yet answered
    for i, message in enumerate(body["messages"]):
        if message["role"] == "tool":
            if open_ids is None or message["tool_call_id"] not in open_ids:
                if open_ids is not None:
                    return _error(
                        f"Invalid parameter: 'tool_call_id' of '{message['tool_call_id']}' not "
                        "found in 'tool_calls' of previous message.",
                        f"messages.[{i}].tool_call_id",
                    )
                return _error(
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'.",
                    f"messages.[{i}].role",
                )
            open_ids.remove(message["tool_call_id"])
            continue
        if open_ids:
            return _unanswered(open_ids, i - 1)
        open_ids = [c["id"] for c in message.get("tool_calls") or ()] or None
    if open_ids:
        return _unanswered(open_ids, len(body["messages"]) - 1)
    return None


def _unanswered(ids: list[str], at: int) -> dict[str, Any]:
    return _error(
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        + ", ".join(ids),
        f"messages.[{at}].role",
    )


# --- the strictest chat templates ----------------------------------------------------------

ALTERNATE = (
    "After the optional system message, conversation roles must alternate "
    "user/assistant/user/assistant/..."
)
GEMMA_ALTERNATE = "Conversation roles must alternate user/assistant/user/assistant/..."
SINGLE_CALL = "This model only supports single tool-calls at once!"
CALL_IDS = "Tool call IDs should be alphanumeric strings with length 9!"
NO_CALL_BEFORE = (
    "Message has tool role, but there was no previous assistant message with a tool call!"
)
NO_SYSTEM = "System role not supported"
SYSTEM_FIRST = "System message must be at the beginning."
FIRST_USER = "Cannot put tools in the first user message when there's no first user message!"
ARGUMENTS_JSON = "Failed to parse tool call arguments as JSON"


def _json_object(arguments: Any) -> bool:
    """llama.cpp (and vLLM, for its templates) parse each call's arguments in the history;
    the templates then read them as an object."""
    try:
        return isinstance(json.loads(arguments), dict)
    except (TypeError, ValueError, RecursionError):
        return False


def template_refusal(
    body: dict[str, Any], system_role: bool = True, every_message: bool = False
) -> str | None:
    """The exception the strictest mainstream templates raise for `body`, or None.

    `every_message`: Gemma 2's template, which knows no function messages and counts every
    message in its alternation."""
    messages = body.get("messages") or []
    if every_message:
        roles = [m.get("role") for m in messages if m.get("role") != "system"]
        if any(r not in ("user", "assistant") for r in roles) or any(
            m.get("tool_calls") for m in messages
        ):
            return GEMMA_ALTERNATE
        if any(r != ("user", "assistant")[i % 2] for i, r in enumerate(roles)):
            return GEMMA_ALTERNATE
    if any(m.get("role") == "system" for m in messages[1:]):
        return SYSTEM_FIRST
    if messages and messages[0].get("role") == "system":
        if not system_role:
            return NO_SYSTEM
        messages = messages[1:]
    if messages and messages[0].get("role") != "user":
        return FIRST_USER
    expected, last_call = "user", None
    for message in messages:
        role, calls = message.get("role"), message.get("tool_calls")
        if role == "tool":
            if last_call is None:
                return NO_CALL_BEFORE
            if not re.fullmatch(r"[A-Za-z0-9]{9}", str(message.get("tool_call_id"))):
                return CALL_IDS
            continue
        if calls:
            if len(calls) != 1:
                return SINGLE_CALL
            if not re.fullmatch(r"[A-Za-z0-9]{9}", str(calls[0].get("id"))):
                return CALL_IDS
            if not _json_object(calls[0].get("function", {}).get("arguments")):
                return ARGUMENTS_JSON
            last_call = calls[0]
            continue
        if role != expected:
            return ALTERNATE
        expected = "assistant" if role == "user" else "user"
        last_call = None if role == "assistant" else last_call
    return None
