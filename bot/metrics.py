"""Metrics for operators: `PrometheusMetrics`, the engine's `core.ports.Metrics` over its own
CollectorRegistry, with a queue-depth gauge measured in Postgres at scrape time (events,
outbox, waiting_for_model) and companion_model_up. Apart from the logs (bot.observability)
so that a command that serves no /metrics does not import prometheus_client, the ORM and
the engine's handling.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client import Counter as Counter_
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.events import DEFERRED, EventStatus
from core.models import Event, Reply
from core.ports import Counter, Timer
from core.wire.outage import Outage

log = logging.getLogger(__name__)

SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120)
# (help, label names) of every metric the engine reports; exported with the `companion_` prefix
COUNTERS: dict[Counter, tuple[str, tuple[str, ...]]] = {
    Counter.EVENTS: ("Events handled, by kind and outcome", ("kind", "status")),
    Counter.ERRORS: ("Turns that failed: the model endpoint, or the engine", ("kind",)),
    Counter.FLUSHES: ("Queue flushes: oldest messages summarised out of the prompt", ()),
    Counter.WARNINGS: ("Memory-pressure warnings given to agents", ()),
    Counter.PROMPT_TOKENS: ("Prompt tokens sent to the model", ()),
    Counter.CACHED_TOKENS: (
        "Prompt tokens the provider served from its prompt cache (part of prompt_tokens)",
        (),
    ),
    Counter.COMPLETION_TOKENS: ("Completion tokens received from the model", ()),
    Counter.LIMITED: ("Events refused by a rate limit or token budget", ("reason",)),
    Counter.WIRE_REPAIRS: (
        "Repairs made to requests built from a damaged history (an unanswered call...)",
        ("kind",),
    ),
    Counter.MODEL_RETRIES: (
        "Steps asked again: a timeout waited out, unreadable output or a cut call the model "
        "was told about",
        ("reason",),
    ),
}
TIMERS: dict[Timer, tuple[str, tuple[str, ...]]] = {
    Timer.MODEL: ("Duration of one chat-model call", ()),
    Timer.TURN: ("Duration of handling one event", ()),
    Timer.ACK: (
        "From a Slack request's arrival to its acknowledgement (Slack retries after 3 s)",
        (),
    ),
}
QUEUE_TIMEOUT = 2.0


class _QueueDepth(Collector):
    """Reports the last measured depths; nothing when the last measurement failed."""

    def __init__(self) -> None:
        self.depth: dict[str, int] = {}

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            "companion_queue_depth",
            "Pending events and undelivered replies, measured in Postgres at scrape time",
            labels=["queue"],
        )
        for queue, count in self.depth.items():
            family.add_metric([queue], count)
        yield family


class _ModelUp(Collector):
    """1 while the model endpoint answers, 0 while it is down (`core.wire.outage`)."""

    def __init__(self, outage: Outage) -> None:
        self.outage = outage

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            "companion_model_up", "Whether the model endpoint answers (0 during an outage)"
        )
        family.add_metric([], 0 if self.outage.down_since else 1)
        yield family


class PrometheusMetrics:
    """The engine's `Metrics` port as Prometheus counters and histograms.

    Every `Counter` and `Timer` of `core.ports` is created up front (a missing description
    fails at start, not at the first event). A metric reported with labels it was not
    declared with is dropped and logged: reporting never breaks a turn.
    """

    def __init__(
        self, sessions: async_sessionmaker[AsyncSession] | None = None, outage: Outage | None = None
    ) -> None:
        self.sessions = sessions
        self.registry = CollectorRegistry()
        self._counters = {
            metric: Counter_(
                f"companion_{metric}",
                COUNTERS[metric][0],
                list(COUNTERS[metric][1]),
                registry=self.registry,
            )
            for metric in Counter
        }
        self._timers = {
            metric: Histogram(
                f"companion_{metric}",
                TIMERS[metric][0],
                list(TIMERS[metric][1]),
                registry=self.registry,
                buckets=SECONDS,
            )
            for metric in Timer
        }
        self._queues = _QueueDepth()
        self.registry.register(self._queues)
        if outage is not None:
            self.registry.register(_ModelUp(outage))

    def count(self, metric: Counter, amount: float = 1, **labels: str) -> None:
        counter = self._counters[metric]
        try:
            (counter.labels(**labels) if labels else counter).inc(amount)
        except ValueError as error:
            log.warning("metric %s dropped: %s", metric, error)

    def observe(self, metric: Timer, seconds: float, **labels: str) -> None:
        histogram = self._timers[metric]
        try:
            (histogram.labels(**labels) if labels else histogram).observe(seconds)
        except ValueError as error:
            log.warning("metric %s dropped: %s", metric, error)

    async def measure_queues(self) -> None:
        """Count pending events and undelivered replies (at most QUEUE_TIMEOUT seconds)."""
        if self.sessions is None:
            return
        try:
            async with asyncio.timeout(QUEUE_TIMEOUT), self.sessions() as session:
                events = await session.scalar(
                    select(func.count())
                    .select_from(Event)
                    .where(Event.status == EventStatus.PENDING)
                )
                outbox = await session.scalar(
                    select(func.count()).select_from(Reply).where(Reply.delivered_at.is_(None))
                )
                waiting = await session.scalar(
                    select(func.count())
                    .select_from(Event)
                    .where(
                        Event.status == EventStatus.PENDING,
                        Event.error.startswith(DEFERRED, autoescape=True),
                    )
                )
            self._queues.depth = {
                "events": int(events or 0),
                "outbox": int(outbox or 0),
                "waiting_for_model": int(waiting or 0),
            }
        except Exception as error:  # TimeoutError included
            self._queues.depth = {}
            log.warning("queue depth not measured: %s", error)

    async def exposition(self) -> bytes:
        """The Prometheus text format, queue depths measured just now."""
        await self.measure_queues()
        return generate_latest(self.registry)
