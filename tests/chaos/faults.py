"""What goes wrong, and how often: the campaign's knobs and one seeded source of faults.

    Knobs    every rate, size and count of one campaign (`FAST` for the test suite, `LONG`
             for bench/chaos.py); frozen, printed with the results
    Faults   the fakes ask it before each answer: how long to wait, whether to fail.
             `calm()` turns every fault off for the end of a campaign (the settle phase);
             `outage(seconds)` makes every model call fail for a while (Postgres restarts
             and settings races are the plan's, tests/chaos/plan.py)

Draws come from one `random.Random(seed)`; the processes and the event loop decide the
order in which fakes ask, so a seed fixes the plan and the rates, not every single draw.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Knobs:
    # Who talks, and how much
    slack_teams: int = 2
    discord_guilds: int = 2
    members_per_tenant: int = 2
    items: int = 32  # messages and uploads, over `seconds`
    seconds: float = 16.0
    p_long: float = 0.2  # a long message (Slack: up to 40,000 characters, Discord: 2,000)
    p_hostile: float = 0.15  # NUL bytes, lone surrogates, pings, injections, odd Unicode
    p_upload: float = 0.12  # a file (with words beside it half of the time)
    p_reused_file: float = 0.3  # a Slack upload reusing another member's file id
    p_redelivery: float = 0.15  # Slack sends an acknowledged event again (its retry)
    p_discord_waits: float = 0.75  # a Discord message is posted while the bot is connected
    imports: int = 1  # `companion import --replace` while the member talks
    scenes: bool = True  # the scripted moments of tests/chaos/plan.py (add_scenes)
    # The bot process
    lifetime: tuple[float, float] = (4.0, 7.0)  # seconds a `companion run` lives
    p_kill: float = 0.6  # SIGKILL; otherwise SIGTERM
    gateway_drops: int = 1  # the gateway socket dropped (the bot resumes)
    # The model
    model_latency: float = 0.25  # seconds, at most
    p_model_500: float = 0.06
    p_model_429: float = 0.04
    p_model_timeout: float = 0.015
    p_model_garbage: float = 0.03
    outages: int = 1  # windows where every model call fails
    outage_seconds: float = 5.0
    # The database
    pg_restarts: int = 1  # the server stopped (fast, immediate) or a backend killed, mid-run
    pg_down: tuple[float, float] = (0.5, 3.0)  # seconds without a server, after a stop
    # Members' settings
    settings_races: int = 2  # a member's time zone and quiet hours changed at the same moment
    # The platforms
    platform_latency: float = 0.15
    p_platform_500: float = 0.04
    p_platform_429: float = 0.04
    # The product's settings
    window: int = 8192
    rate_limit: str = "10/minute"
    member_daily_tokens: int = 60_000
    model_timeout: int = 5  # seconds; a "timeout" fault hangs longer than this
    model_retries: int = 1

    def scaled(self, **changes: object) -> Knobs:
        return replace(self, **changes)  # type: ignore[arg-type]


FAST = Knobs()
LONG = Knobs(
    slack_teams=3,
    discord_guilds=2,
    members_per_tenant=4,
    items=220,
    seconds=75.0,
    imports=4,
    gateway_drops=3,
    outages=3,
    pg_restarts=3,
    settings_races=6,
    lifetime=(5.0, 14.0),
)


# Nothing breaks: no kills (one process, stopped with SIGTERM at the end), no errors, no
# imports, no scenes. What it finds is a false alarm of the checks or a plain bug.
CALM = Knobs(
    imports=0,
    scenes=False,
    lifetime=(60.0, 60.0),
    gateway_drops=0,
    p_model_500=0,
    p_model_429=0,
    p_model_timeout=0,
    p_model_garbage=0,
    outages=0,
    pg_restarts=0,
    settings_races=0,
    p_platform_500=0,
    p_platform_429=0,
    p_reused_file=0,
)


class Faults:
    def __init__(self, rng: random.Random, knobs: Knobs) -> None:
        self.rng = rng
        self.knobs = knobs
        self.calm_now = False
        self.outage_until = 0.0
        self.injected: dict[str, int] = {}

    def calm(self) -> None:
        self.calm_now = True

    def outage(self, seconds: float) -> None:
        self.outage_until = time.monotonic() + seconds

    def _count(self, what: str) -> None:
        self.injected[what] = self.injected.get(what, 0) + 1

    async def platform_call(self, what: str) -> int | None:
        """Wait a while; then None (answer normally) or the HTTP status to fail with."""
        if self.calm_now:
            return None
        knobs = self.knobs
        await asyncio.sleep(self.rng.uniform(0, knobs.platform_latency))
        draw = self.rng.random()
        if draw < knobs.p_platform_500:
            self._count(f"{what} 500")
            return 500
        if draw < knobs.p_platform_500 + knobs.p_platform_429:
            self._count(f"{what} 429")
            return 429
        return None

    async def model_call(self) -> str | None:
        """Wait a while; then None or the fault: '500', '429', 'timeout', 'garbage'."""
        if self.calm_now:
            return None
        if time.monotonic() < self.outage_until:
            self._count("model outage 500")
            return "500"
        knobs = self.knobs
        await asyncio.sleep(self.rng.uniform(0, knobs.model_latency))
        draw = self.rng.random()
        for fault, p in (
            ("500", knobs.p_model_500),
            ("429", knobs.p_model_429),
            ("timeout", knobs.p_model_timeout),
            ("garbage", knobs.p_model_garbage),
        ):
            if draw < p:
                self._count(f"model {fault}")
                return fault
            draw -= p
        return None
