"""One agent turn: from an event to the agent's replies, inside the agent's transaction.

    trigger message -> [fit the prompt -> model -> run functions]* -> replies

`Turn.run` keeps calling the model while the chain continues: a function other than
send_message ran, a call failed, or one asked for a heartbeat. It ends after `max_steps`
model calls, or when send_message is called more than `max_sends` times. `fit_prompt` is the queue
manager at work: a memory-pressure alert at the warning watermark (once per episode), and
a flush with a new recursive summary when the next prompt would not fit.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cache
from typing import Any

from core.config import EngineConfig
from core.errors import ContextTooSmall, ModelOutputError
from core.events import EventKind, clean_text, trigger_fields
from core.memory.executor import SCHEMAS, Outcome, execute
from core.memory.prompt import INSTRUCTIONS, assemble, render
from core.memory.queue import Pressure, evict_until, pressure
from core.memory.store import AgentStore
from core.memory.summarize import summarize
from core.memory.tokens import TokenCounter
from core.memory.tools import ToolContext
from core.models import Agent, Event, Message, Summary
from core.ports import (
    ChatModel,
    Completion,
    Counter,
    Embedder,
    Metrics,
    NoMetrics,
    Timer,
    ToolCall,
)

MAX_ARGUMENT_CHARS = 8000
PRESSURE_ALERT = (
    "memory pressure: the conversation now fills {pct}% of your context window. The oldest "
    "messages will soon be summarised and leave view (they stay in recall storage). Save "
    "anything important to working context or archival memory now."
)
STEP_CAP_NOTE = "step limit reached: your turn was ended after {n} steps."
STEP_CAP_REPLY = "(I went round in circles thinking about that. Could you say it another way?)"
SEND_CAP_NOTE = (
    "message limit reached: a turn may send at most {n} messages, so your turn was ended and "
    "{refused} more were not sent."
)
EMPTY_ANSWER_NOTE = "your last answer was empty. Reply to the person with send_message."


@dataclass(frozen=True)
class Step:
    thought: str | None
    outcomes: tuple[Outcome, ...]
    prompt_tokens: int


@dataclass
class TurnResult:
    event_id: int
    replies: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    warnings: int = 0
    flushes: int = 0
    tokens: int = 0  # prompt + completion tokens of every model call in the turn
    error: str | None = None


@dataclass
class Mind:
    """What a turn needs besides the agent's own memory."""

    model: ChatModel
    counter: TokenCounter
    config: EngineConfig
    embedder: Embedder | None = None
    metrics: Metrics = field(default_factory=NoMetrics)


def check_window(config: EngineConfig) -> None:
    """Refuse a window too small for instructions, schemas, full blocks and one message."""
    fixed = TokenCounter.count(INSTRUCTIONS) + tools_tokens()
    fixed += (config.persona_limit + config.human_limit) // 3
    needed = fixed + config.max_summary_tokens + config.max_message_tokens + config.reply_reserve
    if needed > config.prompt_budget + config.reply_reserve:
        raise ContextTooSmall(
            f"a context window of {config.context_window} tokens is too small for the "
            f"instructions, function schemas and working context ({fixed} tokens) plus a "
            "summary, a message and a reply; raise COMPANION_CONTEXT_WINDOW"
        )


def _cleaned(completion: Completion) -> Completion:
    """Model output that Postgres can store (no NUL bytes, no lone surrogates)."""
    calls = tuple(
        ToolCall(c.id, clean_text(c.name), clean_text(c.arguments)) for c in completion.tool_calls
    )
    content = clean_text(completion.content) if completion.content else completion.content
    return replace(completion, content=content, tool_calls=calls)


def _tool_calls_json(completion: Completion) -> list[dict[str, Any]] | None:
    if not completion.tool_calls:
        return None
    calls = []
    for call in completion.tool_calls:
        arguments = call.arguments
        if len(arguments) > MAX_ARGUMENT_CHARS:
            arguments = json.dumps({"cut": f"{len(call.arguments)} characters of arguments"})
        calls.append(
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name[:200], "arguments": arguments},
            }
        )
    return calls


class Turn:
    def __init__(
        self,
        mind: Mind,
        store: AgentStore,
        agent: Agent,
        event: Event,
        now: datetime,
        timezone: str,
    ) -> None:
        self.mind = mind
        self.store = store
        self.agent = agent
        self.event = event
        self.now = now
        self.timezone = timezone
        self.result = TurnResult(event.id)
        self.queue: list[Message] = []
        self.protect: Message | None = None
        self.summary: Summary | None = None  # FIFO slot 0, loaded once per turn

    async def _append(self, **fields: Any) -> Message:
        message = await self.store.append(
            self.now, self._tokens_of, event_id=self.event.id, **fields
        )
        self.queue.append(message)
        return message

    def _tokens_of(self, message: Message) -> int:
        return self.mind.counter.count_message(render(message, self.mind.config.max_message_tokens))

    async def run(self) -> TurnResult:
        config = self.mind.config
        blocks = await self.store.blocks()
        self.queue = await self.store.in_context()
        self.summary = await self.store.latest_summary()
        payload = self.event.payload
        self.protect = await self._append(**trigger_fields(self.event.kind, payload["text"]))
        tools = ToolContext(
            self.store, blocks, config, self.now, self.timezone, self.mind.embedder, self.event.id
        )
        max_steps = config.max_steps
        if (payload.get("meta") or {}).get("purpose") == "upkeep":
            tools.may_send = False  # tidying memory, not talking
            max_steps = min(max_steps, config.schedule.upkeep_steps)
        for _ in range(max_steps):
            prompt, tokens, raw = await self.fit_prompt(blocks)
            completion = await self._complete(prompt, raw)
            if not await self._step(completion, tools, tokens):
                break
        else:
            await self._append(role="system", content=STEP_CAP_NOTE.format(n=max_steps))
            if not tools.sent and self.event.kind == EventKind.USER_MESSAGE:
                tools.sent.append(STEP_CAP_REPLY)
        self.result.replies = list(tools.sent)
        return self.result

    async def _complete(self, prompt: list[dict[str, Any]], raw: int) -> Completion:
        metrics, started = self.mind.metrics, time.perf_counter()
        completion = await self.mind.model.complete(prompt, SCHEMAS, self.mind.config.reply_reserve)
        metrics.observe(Timer.MODEL, time.perf_counter() - started)
        self.mind.counter.calibrate(raw, completion.prompt_tokens)
        prompt_tokens = completion.prompt_tokens or self.mind.counter.scale(raw)
        completion_tokens = completion.completion_tokens or 0
        metrics.count(Counter.PROMPT_TOKENS, prompt_tokens)
        metrics.count(Counter.COMPLETION_TOKENS, completion_tokens)
        self.result.tokens += prompt_tokens + completion_tokens
        return completion

    async def _step(self, completion: Completion, tools: ToolContext, tokens: int) -> bool:
        """Record the model's answer and run its calls; True when the chain goes on."""
        if completion.content is not None and not isinstance(completion.content, str):
            raise ModelOutputError("the model's message content is not text")
        completion = _cleaned(completion)
        thought = completion.content
        if not completion.tool_calls and not (thought or "").strip():
            self.result.steps.append(Step(thought, (), tokens))
            if self.event.kind == EventKind.USER_MESSAGE and not tools.sent:
                await self._append(role="system", content=EMPTY_ANSWER_NOTE)
                return True  # a member who wrote gets an answer, not silence
            return False  # e.g. a scheduled interrupt: staying quiet is a choice
        if not completion.tool_calls:
            # No functions at all: a plain answer is the reply, unless one was already sent.
            said = None
            if thought and thought.strip() and not tools.sent:
                said = thought.strip()
                tools.sent.append(said)
            await self._append(role="assistant", content=thought, search_text=said)
            self.result.steps.append(Step(thought, (), tokens))
            return False
        sent_before = len(tools.sent)
        outcomes = [await execute(call, tools) for call in completion.tool_calls]
        # Stored after running, so the call carries what it said; ids keep the order.
        said = "\n".join(tools.sent[sent_before:]) or None
        await self._append(
            role="assistant",
            content=thought,
            tool_calls=_tool_calls_json(completion),
            search_text=said,
        )
        for outcome in outcomes:
            await self._append(role="tool", content=outcome.result, tool_call_id=outcome.call.id)
        self.result.steps.append(Step(thought, tuple(outcomes), tokens))
        if tools.refused_sends:
            note = SEND_CAP_NOTE.format(n=self.mind.config.max_sends, refused=tools.refused_sends)
            await self._append(role="system", content=note)
            return False
        sent = any(o.ok and o.call.name == "send_message" for o in outcomes)
        return any(not o.ok or o.heartbeat for o in outcomes) or not sent

    async def fit_prompt(self, blocks: dict) -> tuple[list[dict[str, Any]], int, int]:
        """The prompt for the next call: warn or flush first if the queue manager says so."""
        config = self.mind.config
        prompt, tokens, raw = await self._assemble(blocks)
        state = pressure(
            tokens, config.warning_tokens, config.prompt_budget, self.agent.pressure_warned
        )
        if state is Pressure.WARN:
            pct = 100 * tokens // config.context_window
            await self._append(role="system", content=PRESSURE_ALERT.format(pct=pct))
            self.agent.pressure_warned = True
            self.result.warnings += 1
            self.mind.metrics.count(Counter.WARNINGS)
            prompt, tokens, raw = await self._assemble(blocks)
        if tokens > config.prompt_budget:
            await self._flush(tokens, raw)
            prompt, tokens, raw = await self._assemble(blocks)
        if tokens > config.prompt_budget:
            raise ContextTooSmall(
                f"the prompt needs {tokens} tokens even after eviction, over the budget of "
                f"{config.prompt_budget}; the context window is too small"
            )
        return prompt, tokens, raw

    async def _flush(self, tokens: int, raw: int) -> None:
        config, counter = self.mind.config, self.mind.counter
        previous = self.summary
        queue_raw = sum(m.tokens for m in self.queue)
        # Everything but the queue, with room for the new summary at its largest.
        fixed = raw - queue_raw - (previous.tokens if previous else 0) + config.max_summary_tokens
        target = int(config.target_tokens / counter.ratio)
        evicted = evict_until(self.queue, fixed, target, self.protect)
        if not evicted:
            return
        text = await summarize(
            self.mind.model, counter, config, previous.text if previous else None, evicted
        )
        covers = (previous.covers_messages if previous else 0) + len(evicted)
        await self.store.evict(evicted)
        self.summary = await self.store.add_summary(
            text, covers, counter.count(text) + 40, self.now
        )
        gone = {id(m) for m in evicted}
        self.queue = [m for m in self.queue if id(m) not in gone]
        self.agent.pressure_warned = False
        self.result.flushes += 1
        self.mind.metrics.count(Counter.FLUSHES)

    async def _assemble(self, blocks: dict) -> tuple[list[dict[str, Any]], int, int]:
        config, counter = self.mind.config, self.mind.counter
        summary = self.summary
        # The summary covers exactly the messages evicted so far: those only search can reach.
        recall = summary.covers_messages if summary else 0
        archival = await self.store.passage_count()
        queue = [render(m, config.max_message_tokens) for m in self.queue]
        prompt, used = assemble(
            blocks=list(blocks.values()),
            summary=(summary.text, summary.covers_messages) if summary else None,
            queue=queue,
            queue_tokens=sum(m.tokens for m in self.queue),
            tools_tokens=tools_tokens(),
            counter=counter,
            window=config.context_window,
            now=self.now,
            timezone=self.timezone,
            recall=recall,
            archival=archival,
        )
        return prompt, used, int(used / counter.ratio)


@cache
def tools_tokens() -> int:
    """Tokens the function schemas take in every prompt."""
    return TokenCounter.count_tools(SCHEMAS)
