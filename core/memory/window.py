"""The main context of one turn, kept inside the window: the queue manager at work.

`MainContext` holds the FIFO queue (the agent's in-context messages, each rendered and
counted once, when stored), the recursive summary in slot 0 and the newest message, which
never leaves. It starts from the snapshot the agent's previous turn left in this process
(`core.memory.contexts`) when the agent row says nothing changed since, else it reads the
queue; messages of the turn are appended to it. `fit` turns it into the next prompt,
within the budget whatever the database held: a memory-pressure alert at the warning
watermark (once per episode), a flush (evict the oldest units, fold them into a new
summary) when the prompt would not fit, and if even that leaves too much, the newest
message cut to the room that is left.
"""

from __future__ import annotations

import math
from datetime import datetime
from functools import cache
from typing import Any

from core.config import EngineConfig
from core.errors import ContextTooSmall
from core.memory.contexts import ContextCache, Snapshot
from core.memory.executor import SCHEMAS
from core.memory.prompt import (
    INSTRUCTIONS,
    Assembled,
    Entry,
    assemble,
    count_basis,
    head,
    render,
    summary_message,
)
from core.memory.queue import Pressure, evict_until, pressure
from core.memory.store import AgentStore
from core.memory.summarize import summarize
from core.memory.tokens import TokenCounter
from core.models import Agent, Block, Summary
from core.ports import ChatModel, Counter, Metrics

PRESSURE_ALERT = (
    "memory pressure: the conversation now fills {pct}% of your context window. The oldest "
    "messages will soon be summarised and leave view (they stay in recall storage). Save "
    "anything important to working context or archival memory now."
)
SUMMARY_FRAME = 40  # tokens the summary's own message adds around its text
CUT_MARGIN = 64  # tokens the cut note and rounding may add back to a cut message
MIN_SHOWN = 16  # fewer tokens than this of the newest message is not worth a prompt


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
        contexts: ContextCache,
    ) -> None:
        self.store, self.agent, self.model = store, agent, model
        self.counter, self.config, self.metrics = counter, config, metrics
        self.event_id, self.now, self.timezone = event_id, now, timezone
        self.contexts = contexts
        self.community = ("", "")  # the community's name and instructions (core.companion)
        self.basis = count_basis(config.max_message_tokens)
        self.queue: list[Entry] = []
        self.shown: list[dict[str, Any]] = []  # the queue as the prompt shows it
        self.queue_tokens = 0
        self.newest: Entry | None = None  # the event's own message: never evicted
        self.summary: Summary | None = None  # FIFO slot 0
        self.summary_shown: tuple[dict[str, Any], int] | None = None
        self.archival = 0  # passages in archival storage when the turn began
        self.warnings = 0
        self.flushes = 0

    async def load(self, trigger: dict[str, Any]) -> bool:
        """Take up the queue and summary, then store the event's message (`trigger`) at its
        end; True when an earlier try of this event stored it (the turn goes on from there)."""
        agent = self.agent
        kept = self.contexts.get(agent.id, agent.context_version, self.basis)
        if kept is None:
            self.queue = await self.store.queue(recount=agent.count_basis != self.basis)
            agent.count_basis = self.basis
            self.queue_tokens = sum(entry.tokens for entry in self.queue)
            self._set_summary(await self.store.latest_summary())
        else:
            self.queue, self.queue_tokens = list(kept.entries), kept.queue_tokens
            self.summary, self.summary_shown = kept.summary, kept.summary_shown
        self.shown = [entry.shown for entry in self.queue]
        self.archival = self.store.passages  # counted when the row was locked
        stored = next((e for e in self.queue if e.message.event_id == self.event_id), None)
        self.newest = stored or await self.append(**trigger)
        return stored is not None

    def steps_taken(self) -> int:
        """The model's answers to this event already in the queue (a resumed turn)."""
        return sum(
            e.message.event_id == self.event_id and e.role == "assistant" for e in self.queue
        )

    def snapshot(self) -> Snapshot:
        """What this turn leaves for the agent's next one (valid once it commits)."""
        return Snapshot(
            self.agent.context_version,
            self.basis,
            tuple(self.queue),
            self.queue_tokens,
            self.summary,
            self.summary_shown,
        )

    def _set_summary(self, summary: Summary | None) -> None:
        self.summary, self.summary_shown = summary, None
        if summary is not None:
            shown = summary_message(
                summary.text, summary.covers_messages, self.config.max_summary_tokens
            )
            self.summary_shown = (shown, self.counter.count_message(shown))

    async def append(self, **fields: Any) -> Entry:
        """Store a message of this event at the end of the queue (the store counts it)."""
        entry = await self.store.enqueue(self.now, event_id=self.event_id, **fields)
        self.queue.append(entry)
        self.shown.append(entry.shown)
        self.queue_tokens += entry.tokens
        return entry

    async def fit(self, blocks: dict[str, Block], flush: bool = False) -> Assembled:
        """The prompt for the next call, within the budget whatever the queue holds.

        Warn or flush first if the queue manager says so (or `flush` forces it); if even
        the flush leaves too much, the newest message is cut to the room that is left.
        """
        config = self.config
        fitted = self._assemble(blocks)
        state = pressure(
            fitted.tokens, config.warning_tokens, config.prompt_budget, self.agent.pressure_warned
        )
        if state is Pressure.WARN:
            pct = 100 * fitted.tokens // config.context_window
            await self.append(role="system", content=PRESSURE_ALERT.format(pct=pct))
            self.agent.pressure_warned = True
            self.warnings += 1
            self.metrics.count(Counter.WARNINGS)
            fitted = self._assemble(blocks)
        if flush or fitted.tokens > config.prompt_budget:
            await self._flush(fitted.raw)
            fitted = self._assemble(blocks)
        if fitted.tokens > config.prompt_budget:
            fitted = self._cut_newest(blocks, fitted)
        return fitted

    def _cut_newest(self, blocks: dict[str, Block], fitted: Assembled) -> Assembled:
        """The prompt with the newest message cut so the whole fits (recall keeps it all)."""
        budget = self.config.prompt_budget
        assert self.newest is not None, "load() stores the newest message first"
        over = math.ceil((fitted.tokens - budget) / self.counter.ratio)
        limit = self.newest.tokens - over - CUT_MARGIN
        if limit >= MIN_SHOWN:
            fitted = self._assemble(blocks, newest_limit=limit)
        if fitted.tokens > budget:
            raise ContextTooSmall(
                f"the prompt needs {fitted.tokens} tokens even after eviction, over the "
                f"budget of {budget}; the context window is too small"
            )
        return fitted

    async def _flush(self, raw: int) -> None:
        config, counter = self.config, self.counter
        previous = self.summary
        summary_raw = self.summary_shown[1] if self.summary_shown else 0
        # Everything but the queue, with room for the new summary at its largest.
        fixed = raw - self.queue_tokens - summary_raw + config.max_summary_tokens + SUMMARY_FRAME
        target = int(config.target_tokens / counter.ratio)
        evicted = evict_until(self.queue, fixed, target, self.newest)
        if not evicted:
            return
        messages = [entry.message for entry in evicted]
        text = await summarize(
            self.model, counter, config, previous.text if previous else None, messages
        )
        covers = (previous.covers_messages if previous else 0) + len(evicted)
        await self.store.evict(messages)
        self._set_summary(
            await self.store.add_summary(
                text, covers, counter.count(text) + SUMMARY_FRAME, self.now
            )
        )
        gone = {id(entry) for entry in evicted}
        self.queue = [entry for entry in self.queue if id(entry) not in gone]
        self.shown = [entry.shown for entry in self.queue]
        self.queue_tokens = sum(entry.tokens for entry in self.queue)
        self.agent.pressure_warned = False
        self.flushes += 1
        self.metrics.count(Counter.FLUSHES)

    def _out_of_view(self) -> int:
        """Searchable messages only search reaches now: the agent's, less those in view
        (an import brings past sessions out of view, with or without a summary)."""
        in_view = sum(entry.message.search_text is not None for entry in self.queue)
        return max(self.store.searchable - in_view, 0)

    def _assemble(self, blocks: dict[str, Block], newest_limit: int | None = None) -> Assembled:
        """The prompt as the queue stands; `newest_limit` cuts the newest message further."""
        config, counter = self.config, self.counter
        queue, queue_tokens = self.shown, self.queue_tokens
        if newest_limit is not None and self.newest is not None:
            at = next(i for i, e in enumerate(self.queue) if e is self.newest)
            cut = render(self.newest.message, newest_limit)
            queue = [*queue[:at], cut, *queue[at + 1 :]]
            queue_tokens += counter.count_message(cut) - self.newest.tokens
        return assemble(
            head=head(list(blocks.values()), config.context_window, self.community),
            summary=self.summary_shown,
            queue=queue,
            queue_tokens=queue_tokens,
            tools_tokens=tools_tokens(),
            counter=counter,
            window=config.context_window,
            now=self.now,
            timezone=self.timezone,
            recall=self._out_of_view(),
            archival=self.archival + self.store.passages_added,
        )
