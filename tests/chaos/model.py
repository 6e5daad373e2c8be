"""The model of the campaign: tests.fake_openai.FakeOpenAI with a brain that echoes tags.

Every message and file of the campaign starts with its tag, `#chaos/<member>/<n>#`. The
brain finds the turn's trigger (the newest user-role message that carries a tag) and answers
`ack <that tag>`, so a reply names the message it answers and the member it belongs to. Its
way of answering is drawn at random: one send_message, two, a long one (split by the
platform), an archival insert or a search first (the chain goes on), or plain text.

Before answering it asks `Faults` for a latency and a fault (HTTP 500, 429, a hang past the
client's timeout, a garbage body). It reports `usage` itself and writes every call in the
`Ledger`: which `companion` process made it (each process gets its own FakeOpenAI server,
named by its generation), the prompt as the fake counts it (`count_prompt`), the members
whose tags the prompt holds, when it came, and the tokens billed (0 for a failed call).
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.chaos.faults import Faults
from tests.fake_openai import (
    calls,
    completion,
    count_prompt,
    is_summary_request,
    last,
    say,
    summary_of,
    tool_call,
)

TAG = re.compile(r"#chaos/([a-z0-9]+)/([a-z0-9]+)#")
WORDS = "harbour lantern kettle orchard pebble meadow violin ferry cedar thimble".split()


def tag(member: str, n: int | str) -> str:
    return f"#chaos/{member}/{n}#"


def members_in(text: str) -> set[str]:
    return {m for m, _ in TAG.findall(text)}


def prompt_text(body: dict[str, Any]) -> str:
    parts = []
    for message in body.get("messages", []):
        parts.append(str(message.get("content") or ""))
        for call in message.get("tool_calls") or []:
            parts.append(call["function"]["arguments"])
    return "\n".join(parts)


def trigger_tag(body: dict[str, Any]) -> str | None:
    """The newest tag in the user-role messages (the turn's trigger; words left unanswered
    by a failed turn lead the same message)."""
    for message in reversed(body.get("messages", [])[1:]):
        if message.get("role") != "user":
            continue
        found = TAG.findall(str(message.get("content") or ""))
        if found:
            return tag(*found[-1])
    return None


@dataclass
class Call:
    generation: str
    summary: bool
    prompt_tokens: int  # as the fake counts them
    members: set[str]  # whose tags the prompt holds: one member, unless memory crossed
    at: float = 0.0  # time.time() when it arrived
    fault: str | None = None
    billed: int = 0  # prompt + completion tokens reported in `usage`; 0 when the call failed

    @property
    def member(self) -> str | None:
        return next(iter(self.members)) if len(self.members) == 1 else None


@dataclass
class Ledger:
    window: int
    calls: list[Call] = field(default_factory=list)

    def of(self, generation: str) -> list[Call]:
        return [c for c in self.calls if c.generation == generation]


class Brain:
    def __init__(self, faults: Faults, ledger: Ledger, rng: random.Random, timeout: float):
        self.faults = faults
        self.ledger = ledger
        self.rng = rng
        self.timeout = timeout

    def for_generation(self, generation: str) -> Any:
        async def brain(body: dict[str, Any]) -> Any:
            return await self.answer(generation, body)

        return brain

    async def answer(self, generation: str, body: dict[str, Any]) -> Any:
        summary = is_summary_request(body)
        call = Call(
            generation, summary, count_prompt(body), members_in(prompt_text(body)), time.time()
        )
        self.ledger.calls.append(call)
        call.fault = await self.faults.model_call()
        if call.fault is not None:
            return await self._fail(call.fault)
        answer = summary_of(body) if summary else self._turn(body)
        said = json.dumps(answer["choices"][0]["message"])
        completion_tokens = 5 + len(said) // 4
        answer["usage"] = {
            "prompt_tokens": call.prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": call.prompt_tokens + completion_tokens,
        }
        call.billed = call.prompt_tokens + completion_tokens
        return answer

    async def _fail(self, fault: str) -> web.StreamResponse:
        error = json.dumps({"error": {"message": f"chaos {fault}", "type": "server_error"}})
        if fault == "429":
            return web.Response(
                status=429,
                text=error,
                content_type="application/json",
                headers={"retry-after-ms": "100"},
            )
        if fault == "timeout":
            await asyncio.sleep(self.timeout + 1.5)  # the client has given up by now
            return web.Response(status=500, text=error, content_type="application/json")
        if fault == "garbage":
            if self.rng.random() < 0.5:
                return web.Response(
                    status=200, text="<html>upstream confused", content_type="application/json"
                )
            return web.json_response({"id": "x", "object": "chat.completion", "choices": []})
        return web.Response(status=500, text=error, content_type="application/json")

    def _turn(self, body: dict[str, Any]) -> dict[str, Any]:
        mark = trigger_tag(body) or "(no tag)"
        text = f"ack {mark}"
        if last(body).get("role") == "tool":
            return say(text)
        draw = self.rng.random()
        if draw < 0.60:
            return say(text)
        if draw < 0.70:
            return calls(
                tool_call("send_message", message=text),
                tool_call("send_message", message=f"and also {mark}"),
            )
        if draw < 0.78:
            return calls(tool_call("archival_memory_insert", content=f"note about {mark}"))
        if draw < 0.84:
            return calls(tool_call("conversation_search", query=self.rng.choice(WORDS)))
        if draw < 0.92:
            filler = " ".join(self.rng.choice(WORDS) for _ in range(700))
            return say(f"{text} {filler}")
        return completion(text)
