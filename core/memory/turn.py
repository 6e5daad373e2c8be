"""One agent turn: from an event to the agent's replies, inside the agent's transaction.

    trigger message -> [fit the prompt -> model -> run functions]* -> replies

`Turn.run` keeps calling the model while the chain continues: a function other than
send_message ran, a call failed, or one asked for a heartbeat. It ends after `max_steps`
model calls, or when send_message is called more than `max_sends` times. Each prompt comes
from `MainContext.fit` (core.memory.window), which keeps it inside the window whatever the
database holds. A provider that still refuses a prompt as too long makes the turn distrust
its counts, force a flush and try once more. Every model call, summaries included, goes
through `MeteredModel`, which charges it to the turn's result (what budgets and metrics
read): prompt, cached prompt and completion tokens as the provider reported them.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext
from dataclasses import replace
from datetime import datetime
from typing import Any

from core.companion import profile_of
from core.errors import MalformedOutput, ModelOutputError, ModelTimeout, PromptTooLong
from core.events import EventKind, Purpose, clean_text, purpose_of, trigger_fields
from core.memory.executor import SCHEMAS, execute
from core.memory.mind import (  # noqa: F401  (Mind and the results are the turn's words)
    WAITING_NOTICE,
    CallUsage,
    MeteredModel,
    Mind,
    Pause,
    Step,
    TurnResult,
)
from core.memory.prompt import Assembled, cut_arguments, for_member
from core.memory.ranking import agent_name
from core.memory.store import AgentStore
from core.memory.tools import MAX_REPLY_CHARS, ToolContext
from core.memory.window import MainContext
from core.models import Agent, Event
from core.ports import (
    Completion,
    Counter,
    ToolCall,
)

log = logging.getLogger(__name__)

STEP_CAP_NOTE = "step limit reached: your turn was ended after {n} steps."
STEP_CAP_REPLY = "(I went round in circles thinking about that. Could you say it another way?)"
SEND_CAP_NOTE = (
    "message limit reached: a turn may send at most {n} messages, so your turn was ended and "
    "{refused} more were not sent."
)
EMPTY_ANSWER_NOTE = "your last answer was empty. Reply to the person with send_message."
CUT_CALL_NOTE = (
    "your last answer reached the output limit before its function call was complete, so "
    "it was not run. Call the function again, with shorter arguments."
)
MALFORMED_NOTE = (
    "your last answer could not be read as a function call. Call functions in the format "
    "you were given, or reply with send_message."
)
CUT_MARK = " [… cut short]"
MAX_CALL_ID = 200  # characters of a call id kept (the wire sends its own nine, core.wire.shape)


def _cleaned(completion: Completion) -> Completion:
    """Model output that Postgres can store (no NUL bytes, no lone surrogates), call ids
    included: they are stored with the call and its result."""
    calls = tuple(
        ToolCall(clean_text(c.id)[:MAX_CALL_ID], clean_text(c.name), clean_text(c.arguments))
        for c in completion.tool_calls
    )
    content = clean_text(completion.content) if completion.content else completion.content
    return replace(completion, content=content, tool_calls=calls)


def _tool_calls_json(completion: Completion) -> list[dict[str, Any]] | None:
    if not completion.tool_calls:
        return None
    return [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name[:200], "arguments": cut_arguments(call.arguments)},
        }
        for call in completion.tool_calls
    ]


def cut_reply(text: str) -> str:
    """A plain answer (no send_message) is held to the same size as a sent message."""
    if len(text) <= MAX_REPLY_CHARS:
        return text
    return text[: MAX_REPLY_CHARS - 40].rstrip() + "\n[… the rest was too long to send]"


class Turn:
    def __init__(
        self,
        mind: Mind,
        store: AgentStore,
        agent: Agent,
        event: Event,
        now: datetime,
        timezone: str,
        member_name: str | None = None,
        pause: Pause = nullcontext,
        result: TurnResult | None = None,
    ) -> None:
        self.mind = mind
        self.pause = pause
        self.member_name = member_name
        self.store = store
        self.agent = agent
        self.event = event
        self.now = now
        self.timezone = timezone
        # What the turn spent, call by call: the caller may hand it in, to know what was
        # billed whatever becomes of the turn.
        self.result = result if result is not None else TurnResult(event.id)
        self.model = MeteredModel(mind, self.result, self._outside)
        self.tools: ToolContext | None = None
        self.written = (0, 0)  # replies and model calls already in the database
        self.context = MainContext(
            store,
            agent,
            self.model,
            mind.counter,
            mind.config,
            mind.metrics,
            event.id,
            now,
            timezone,
            mind.contexts,
        )
        # Stable for the agent: the provider's prompt cache is routed by it.
        self.cache_key = f"companion-agent-{agent.id}"
        self.waited = False  # a timed-out call was asked again (once per turn)
        self.told_malformed = False  # the model heard its output was unreadable

    async def run(self) -> TurnResult:
        """The turn, from its start or, after a crash, from the last step it saved."""
        config = self.mind.config
        blocks = await self.store.blocks()
        profile = profile_of(self.store.member[0].settings if self.store.member else None)
        self.context.community = (profile.name, profile.instructions)
        payload = self.event.payload
        resumed = await self.context.load(trigger_fields(self.event.kind, payload["text"]))
        self.tools = tools = ToolContext(
            self.store, blocks, config, self.now, self.timezone, self.mind.embedder, self.event.id
        )
        persona = blocks["persona"].value if "persona" in blocks else ""
        tools.member_name = self.member_name
        tools.agent_name = profile.name or agent_name(persona)
        max_steps = config.max_steps
        if purpose_of(payload) is Purpose.UPKEEP:
            tools.may_send = False  # tidying memory, not talking
            max_steps = min(max_steps, config.schedule.upkeep_steps)
        if resumed:  # what the earlier try said and did stays said and done
            said = await self.store.replies_to(self.event.id)
            tools.sent = [text for text in said if text != WAITING_NOTICE]
            self.written = (len(tools.sent), 0)
            max_steps -= self.context.steps_taken()
        for _ in range(max(max_steps, 0)):
            completion, tokens = await self._call(blocks)
            if not await self._step(completion, tools, tokens):
                break
        else:
            await self.context.append(role="system", content=STEP_CAP_NOTE.format(n=max_steps))
            if not tools.sent and self.event.kind == EventKind.USER_MESSAGE:
                tools.sent.append(STEP_CAP_REPLY)
        self.result.replies = list(tools.sent)
        self.result.warnings, self.result.flushes = self.context.warnings, self.context.flushes
        if self.event.kind == EventKind.USER_MESSAGE:
            self.mind.health.saw_turn(any(step.outcomes for step in self.result.steps))
        await self.save_replies()
        await self.save_usage()
        return self.result

    @asynccontextmanager
    async def _outside(self) -> AsyncIterator[None]:
        """Around each model call: what the turn did so far is saved (and committed by the
        pause, so it outlives this process), and no connection waits on the model."""
        await self.save_replies()
        await self.save_usage()
        async with self.pause():
            self.result.recorded = self.written[1]  # the pause committed them
            yield

    def rolled_back(self) -> None:
        """The turn's transaction was rolled back: the usage it held since the last commit
        is to be saved again."""
        self.written = (self.written[0], self.result.recorded)

    async def save_replies(self) -> None:
        """The replies sent since the last save, into the outbox."""
        sent = self.tools.sent if self.tools else []
        for text in sent[self.written[0] :]:
            await self.store.add_outbox(text, self.event.id, self.now)
        self.written = (len(sent), self.written[1])

    async def save_usage(self) -> None:
        """The model calls made since the last save, into the agent's usage of the day."""
        new = self.result.calls[self.written[1] :]
        await self.store.add_usage(
            self.now.date(),
            sum(c.prompt_tokens + c.completion_tokens for c in new),
            len(new),
            sum(c.cached_tokens for c in new),
            sum(c.completion_tokens for c in new),
        )
        self.written = (self.written[0], len(self.result.calls))

    async def _call(self, blocks: dict) -> tuple[Completion, int]:
        """One model call on a fitted prompt: (its answer, the prompt's tokens).

        Refused as too long (the provider counts more than we do), the turn trusts its
        counts less, forces a flush and tries once more. A timeout is waited out once per
        turn (a local server may still be generating: asking again starts over), and output
        the server could not read is told to the model once per turn.
        """
        fitted = await self.context.fit(blocks)
        flushed = False
        while True:
            try:
                return await self._complete(fitted), fitted.tokens
            except PromptTooLong as error:
                if flushed:
                    raise
                flushed = True
                log.warning(
                    "prompt of ~%d tokens refused, flushing to retry: %s", fitted.tokens, error
                )
                self.mind.counter.distrust(fitted.raw, error.prompt_tokens)
                fitted = await self.context.fit(blocks, flush=True)
            except ModelTimeout:
                if self.waited:
                    raise
                self.waited = True
                self._retrying("timeout")
            except MalformedOutput as error:
                if self.told_malformed:
                    raise
                self.told_malformed = True
                self._retrying("malformed")
                log.info("event %s: %s; telling the model", self.event.id, error)
                await self.context.append(role="system", content=MALFORMED_NOTE)
                fitted = await self.context.fit(blocks)

    def _retrying(self, reason: str) -> None:
        self.mind.metrics.count(Counter.MODEL_RETRIES, reason=reason)

    async def _complete(self, fitted: Assembled) -> Completion:
        for kind, count in fitted.repairs.items():
            self.mind.metrics.count(Counter.WIRE_REPAIRS, count, kind=kind)
        limit = self.mind.config.reply_reserve
        return await self.model.complete(
            fitted.prompt, SCHEMAS, limit, cache_key=self.cache_key, estimate=fitted.raw
        )

    async def _step(self, completion: Completion, tools: ToolContext, tokens: int) -> bool:
        """Record the model's answer and run its calls; True when the chain goes on."""
        if completion.content is not None and not isinstance(completion.content, str):
            raise ModelOutputError("the model's message content is not text")
        completion = _cleaned(completion)
        thought = completion.content
        visible = for_member(thought or "")  # an echo of the prompt's alerts is not an answer
        if not completion.tool_calls and not visible:
            self.result.steps.append(Step(thought, (), tokens))
            if self.event.kind == EventKind.USER_MESSAGE and not tools.sent:
                await self.context.append(role="system", content=EMPTY_ANSWER_NOTE)
                return True  # a member who wrote gets an answer, not silence
            return False  # e.g. a scheduled interrupt: staying quiet is a choice
        if completion.cut and completion.tool_calls:
            # Stopped at the output limit: the call may be whole JSON (a server's grammar
            # closes it) and still be cut. Not run; the model is told, as for a bad call.
            self._retrying("cut")
            await self.context.append(role="assistant", content=thought or "")
            await self.context.append(role="system", content=CUT_CALL_NOTE)
            self.result.steps.append(Step(thought, (), tokens))
            return True
        if not completion.tool_calls:
            # No functions at all: a plain answer is the reply, unless one was already sent.
            said = None
            if not tools.sent:
                said = cut_reply(visible + (CUT_MARK if completion.cut else ""))
                tools.sent.append(said)
            await self.context.append(role="assistant", content=thought, search_text=said)
            self.result.steps.append(Step(thought, (), tokens))
            return False
        sent_before = len(tools.sent)
        outcomes = [await execute(call, tools) for call in completion.tool_calls]
        # Stored after running, so the call carries what it said; ids keep the order.
        said = "\n".join(tools.sent[sent_before:]) or None
        await self.context.append(
            role="assistant",
            content=thought,
            tool_calls=_tool_calls_json(completion),
            search_text=said,
        )
        for outcome in outcomes:
            await self.context.append(
                role="tool", content=outcome.result, tool_call_id=outcome.call.id
            )
        self.result.steps.append(Step(thought, tuple(outcomes), tokens))
        if tools.refused_sends:
            note = SEND_CAP_NOTE.format(n=self.mind.config.max_sends, refused=tools.refused_sends)
            await self.context.append(role="system", content=note)
            return False
        sent = any(o.ok and o.call.name == "send_message" for o in outcomes)
        return any(not o.ok or o.heartbeat for o in outcomes) or not sent
