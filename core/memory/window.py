"""The main context of one turn, kept inside the window: the queue manager at work.

`MainContext` holds the FIFO queue (the agent's in-context messages, counted by the store
as it reads them), the recursive summary in slot 0 and the newest message, which never
leaves. `fit` turns them into the next prompt, within the budget whatever the database
held: a memory-pressure alert at the warning watermark (once per episode), a flush (evict
the oldest units, fold them into a new summary) when the prompt would not fit, and if even
that leaves too much, the newest message cut to the room that is left.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from core.config import EngineConfig
from core.errors import ContextTooSmall
from core.memory.executor import SCHEMAS
from core.memory.prompt import INSTRUCTIONS, assemble, render, summary_message
from core.memory.queue import Pressure, evict_until, pressure
from core.memory.store import AgentStore
from core.memory.summarize import summarize
from core.memory.tokens import TokenCounter
from core.models import Agent, Block, Message, Summary
from core.ports import ChatModel, Counter, Metrics

PRESSURE_ALERT = (
    "memory pressure: the conversation now fills {pct}% of your context window. The oldest "
    "messages will soon be summarised and leave view (they stay in recall storage). Save "
    "anything important to working context or archival memory now."
)
SUMMARY_FRAME = 40  # tokens the summary's own message adds around its text
CUT_MARGIN = 64  # tokens the cut note and rounding may add back to a cut message
MIN_SHOWN = 16  # fewer tokens than this of the newest message is not worth a prompt


@dataclass(frozen=True)
class Fitted:
    """A prompt ready to send, with its token count: calibrated, and our own (raw)."""

    prompt: list[dict[str, Any]]
    tokens: int
    raw: int


@cache
def tools_tokens() -> int:
    """Tokens the function schemas take in every prompt."""
    return TokenCounter.count_tools(SCHEMAS)


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


class MainContext:
    """One turn's view of the agent's FIFO queue and summary; `load` it first."""

    def __init__(
        self,
        store: AgentStore,
        agent: Agent,
        model: ChatModel,
        counter: TokenCounter,
        config: EngineConfig,
        metrics: Metrics,
        event_id: int,
        now: datetime,
        timezone: str,
    ) -> None:
        self.store, self.agent, self.model = store, agent, model
        self.counter, self.config, self.metrics = counter, config, metrics
        self.event_id, self.now, self.timezone = event_id, now, timezone
        self.queue: list[Message] = []
        self.newest: Message | None = None  # the event's own message: never evicted
        self.summary: Summary | None = None  # FIFO slot 0
        self.warnings = 0
        self.flushes = 0

    async def load(self, trigger: dict[str, Any]) -> None:
        """Read the queue and summary, then store the event's message (`trigger`) at its end."""
        self.queue = await self.store.in_context()
        self.summary = await self.store.latest_summary()
        self.newest = await self.append(**trigger)

    async def append(self, **fields: Any) -> Message:
        """Store a message of this event at the end of the queue (the store counts it)."""
        message = await self.store.append(self.now, event_id=self.event_id, **fields)
        self.queue.append(message)
        return message

    async def fit(self, blocks: dict[str, Block], flush: bool = False) -> Fitted:
        """The prompt for the next call, within the budget whatever the queue holds.

        Warn or flush first if the queue manager says so (or `flush` forces it); if even
        the flush leaves too much, the newest message is cut to the room that is left.
        """
        config = self.config
        fitted = await self._assemble(blocks)
        state = pressure(
            fitted.tokens, config.warning_tokens, config.prompt_budget, self.agent.pressure_warned
        )
        if state is Pressure.WARN:
            pct = 100 * fitted.tokens // config.context_window
            await self.append(role="system", content=PRESSURE_ALERT.format(pct=pct))
            self.agent.pressure_warned = True
            self.warnings += 1
            self.metrics.count(Counter.WARNINGS)
            fitted = await self._assemble(blocks)
        if flush or fitted.tokens > config.prompt_budget:
            await self._flush(fitted.raw)
            fitted = await self._assemble(blocks)
        if fitted.tokens > config.prompt_budget:
            fitted = await self._cut_newest(blocks, fitted)
        return fitted

    async def _cut_newest(self, blocks: dict[str, Block], fitted: Fitted) -> Fitted:
        """The prompt with the newest message cut so the whole fits (recall keeps it all)."""
        budget = self.config.prompt_budget
        assert self.newest is not None, "load() stores the newest message first"
        over = math.ceil((fitted.tokens - budget) / self.counter.ratio)
        limit = self.newest.tokens - over - CUT_MARGIN
        if limit >= MIN_SHOWN:
            fitted = await self._assemble(blocks, newest_limit=limit)
        if fitted.tokens > budget:
            raise ContextTooSmall(
                f"the prompt needs {fitted.tokens} tokens even after eviction, over the "
                f"budget of {budget}; the context window is too small"
            )
        return fitted

    async def _flush(self, raw: int) -> None:
        config, counter = self.config, self.counter
        previous = self.summary
        queue_raw = sum(m.tokens for m in self.queue)
        summary_raw = 0
        if previous is not None:
            shown = summary_message(
                previous.text, previous.covers_messages, config.max_summary_tokens
            )
            summary_raw = counter.count_message(shown)
        # Everything but the queue, with room for the new summary at its largest.
        fixed = raw - queue_raw - summary_raw + config.max_summary_tokens + SUMMARY_FRAME
        target = int(config.target_tokens / counter.ratio)
        evicted = evict_until(self.queue, fixed, target, self.newest)
        if not evicted:
            return
        text = await summarize(
            self.model, counter, config, previous.text if previous else None, evicted
        )
        covers = (previous.covers_messages if previous else 0) + len(evicted)
        await self.store.evict(evicted)
        self.summary = await self.store.add_summary(
            text, covers, counter.count(text) + SUMMARY_FRAME, self.now
        )
        gone = {id(m) for m in evicted}
        self.queue = [m for m in self.queue if id(m) not in gone]
        self.agent.pressure_warned = False
        self.flushes += 1
        self.metrics.count(Counter.FLUSHES)

    async def _assemble(self, blocks: dict[str, Block], newest_limit: int | None = None) -> Fitted:
        """The prompt as the queue stands; `newest_limit` cuts the newest message further."""
        config, counter, summary = self.config, self.counter, self.summary
        # The summary covers exactly the messages evicted so far: those only search can reach.
        recall = summary.covers_messages if summary else 0
        archival = await self.store.passage_count()
        queue, queue_tokens = [], 0
        for message in self.queue:
            if newest_limit is not None and message is self.newest:
                shown = render(message, newest_limit)
                queue_tokens += counter.count_message(shown)
            else:
                shown = render(message, config.max_message_tokens)
                queue_tokens += message.tokens
            queue.append(shown)
        prompt, used, raw = assemble(
            blocks=list(blocks.values()),
            summary=(summary.text, summary.covers_messages) if summary else None,
            queue=queue,
            queue_tokens=queue_tokens,
            tools_tokens=tools_tokens(),
            counter=counter,
            window=config.context_window,
            max_summary_tokens=config.max_summary_tokens,
            now=self.now,
            timezone=self.timezone,
            recall=recall,
            archival=archival,
        )
        return Fitted(prompt, used, raw)
