"""The knobs of the engine, as one frozen value handed in by the composition root."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import time, timedelta
from typing import Any

from core.prices import Price

DEFAULT_PERSONA = (
    "I am Companion, a warm, curious and candid friend who lives in this community's chat. "
    "I remember what people tell me and bring it up when it helps. I keep replies short."
)
DEFAULT_HUMAN = "Nothing known yet about this person."

# Known context windows (tokens). Anything else: set COMPANION_CONTEXT_WINDOW.
KNOWN_WINDOWS = {
    "gpt-4o": 128_000,
    "gpt-4o-mini": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4.1-mini": 1_047_576,
    "gpt-4.1-nano": 1_047_576,
    "gpt-4-turbo": 128_000,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "gpt-5": 400_000,
    "gpt-5-mini": 400_000,
    "o3-mini": 200_000,
    "o4-mini": 200_000,
    "llama3": 8_192,
    "llama3.1": 131_072,
    "llama3.2": 131_072,
    "qwen2.5": 32_768,
    "mistral": 32_768,
}
FALLBACK_WINDOW = 8_192
# The most of a model's window Companion uses unless COMPANION_CONTEXT_WINDOW says more: a
# prompt grows to the window before its first flush, so a 128k window would make every turn
# of a long conversation cost ~100k tokens. 16k holds the instructions, working context, a
# summary and dozens of messages.
DEFAULT_WINDOW = 16_384


def window_for(model: str) -> int | None:
    """The context window of a known model; tolerates provider prefixes and tags."""
    name = model.rsplit("/", 1)[-1].lower()
    for candidate in (name, name.split(":", 1)[0]):
        if candidate in KNOWN_WINDOWS:
            return KNOWN_WINDOWS[candidate]
    best = max((k for k in KNOWN_WINDOWS if name.startswith(k)), key=len, default=None)
    return KNOWN_WINDOWS[best] if best else None


@dataclass(frozen=True)
class OpenerPolicy:
    """When openers may come (core.schedule.policy decides with it): the deployment's
    defaults, each member's from their own and their community's choices."""

    enabled: bool = True
    inactivity: timedelta = timedelta(days=3)
    jitter: timedelta = timedelta(hours=6)
    min_gap: timedelta = timedelta(days=1)
    max_unanswered: int = 1
    quiet_start: time = time(22, 0)
    quiet_end: time = time(9, 0)
    timezone: str = "UTC"


@dataclass(frozen=True)
class ScheduleConfig:
    """Deployment defaults for scheduled interrupts; tenants and members override some."""

    openers: OpenerPolicy = OpenerPolicy()
    upkeep: bool = False
    upkeep_idle: timedelta = timedelta(hours=2)
    upkeep_steps: int = 4
    batch: int = 20  # the most interrupts one process claims in one tick
    catch_up_spread: timedelta = timedelta(hours=3)


@dataclass(frozen=True)
class EngineConfig:
    context_window: int = FALLBACK_WINDOW
    warning_watermark: float = 0.70
    flush_watermark: float = 1.00
    flush_target: float = 0.50
    # Tokens kept free for the model's answer; the prompt gets the rest of the window.
    reply_reserve: int = 512
    max_steps: int = 10
    max_sends: int = 3  # send_message calls per turn; one more ends the turn
    page_size: int = 5
    persona_limit: int = 2000
    human_limit: int = 2000
    default_persona: str = DEFAULT_PERSONA
    default_human: str = DEFAULT_HUMAN
    # Bounds on what one item may take of the prompt, as fractions of the window.
    max_message_share: float = 0.25
    max_tool_output_chars: int = 3000
    summary_share: float = 0.10
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    # Budgets: a member's messages per window; tokens, and dollars at `price`, per tenant
    # and per member per UTC day.
    rate_limit: int | None = 30
    rate_window: timedelta = timedelta(hours=1)
    tenant_daily_tokens: int | None = None
    member_daily_tokens: int | None = None
    tenant_daily_usd: float | None = None
    member_daily_usd: float | None = None
    price: Price | None = None  # of the chat model: what its tokens cost
    # How long an event waits for a model that is down before it is given up (the member
    # told their message went unanswered).
    outage_wait: timedelta = timedelta(hours=12)

    @property
    def prompt_budget(self) -> int:
        """The most tokens a prompt may have: the flush watermark, less the reply reserve."""
        return int(self.context_window * self.flush_watermark) - self.reply_reserve

    @property
    def warning_tokens(self) -> int:
        return int(self.context_window * self.warning_watermark)

    @property
    def target_tokens(self) -> int:
        return int(self.context_window * self.flush_target)

    @property
    def max_message_tokens(self) -> int:
        return int(self.context_window * self.max_message_share)

    @property
    def max_summary_tokens(self) -> int:
        return max(64, int(self.context_window * self.summary_share))


# Budgets a community's admins may set for themselves, under the operator's (EngineConfig).
LIMIT_KEYS = (
    "rate_limit",
    "member_daily_tokens",
    "tenant_daily_tokens",
    "member_daily_usd",
    "tenant_daily_usd",
)


def within_ceilings(config: EngineConfig, limits: dict[str, Any] | None) -> EngineConfig:
    """The engine's budgets for one community: its admins' own, where they set one, but
    never above the operator's (None: no limit)."""
    if not limits:
        return config
    changes: dict[str, Any] = {}
    for key in LIMIT_KEYS:
        theirs, ceiling = limits.get(key), getattr(config, key)
        if theirs is not None:
            changes[key] = theirs if ceiling is None else min(theirs, ceiling)
    return replace(config, **changes)
