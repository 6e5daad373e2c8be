"""An outage of the model endpoint: when to stop calling it, and when to try again.

A dead endpoint is not asked by every waiting turn (each would wait out its own retries and
timeout): once a call fails as unavailable after its retries (connection refused, 5xx, 429)
or two in a row time out, the endpoint is down. While it is down, calls are refused at once
(`ModelUnavailable`), except one probe at a time once the wait is over; the wait doubles
after each failed probe, from FIRST_WAIT to LONGEST_WAIT. The first call that goes through
ends the outage.

    allow()        may a call go out now? (False: refuse it without asking the endpoint)
    due()          is it up, or is a probe due? (what `allow` would say, taking nothing)

    failed(error)  a call failed the outage way
    answered()     a call went through
    down_since     when the outage began (None: the endpoint is up)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from core.errors import ModelError, ModelTimeout

log = logging.getLogger("companion.model")

FIRST_WAIT = 5.0  # seconds before the first probe of a down endpoint
LONGEST_WAIT = 30.0  # the longest a member waits for a probe after the endpoint is back
TIMEOUTS_IN_A_ROW = 2  # one slow answer is not an outage; two in a row are


class Outage:
    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.monotonic = monotonic
        self.down_since: datetime | None = None
        self.reason = ""
        self.timeouts = 0
        self.wait = FIRST_WAIT
        self.next_probe = 0.0
        self.probing = False

    def allow(self) -> bool:
        if self.down_since is None:
            return True
        if self.probing or self.monotonic() < self.next_probe:
            return False
        self.probing = True  # this caller's call is the probe
        return True

    def due(self) -> bool:
        """Is the endpoint up, or a probe of it due? (`allow` without taking the probe)"""
        if self.down_since is None:
            return True
        return not self.probing and self.monotonic() >= self.next_probe

    def failed(self, error: ModelError) -> None:
        if isinstance(error, ModelTimeout):
            self.timeouts += 1
            if self.timeouts < TIMEOUTS_IN_A_ROW and self.down_since is None:
                return
        if self.down_since is None:
            self.down_since, self.wait = datetime.now(UTC), FIRST_WAIT
            log.error("the model endpoint is down (%s); members' messages wait for it", error)
        elif self.probing:
            self.wait = min(self.wait * 2, LONGEST_WAIT)
        self.reason = str(error)
        self.probing = False
        self.next_probe = self.monotonic() + self.wait

    def answered(self) -> None:
        self.timeouts = 0
        self.probing = False
        if self.down_since is not None:
            seconds = (datetime.now(UTC) - self.down_since).total_seconds()
            log.warning("the model endpoint is back after %.0f s", seconds)
            self.down_since = None

    def gave_up(self) -> None:
        """The probe ended without an answer either way (cancelled): another may go."""
        self.probing = False

    def seconds_to_probe(self) -> float:
        return max(0.0, self.next_probe - self.monotonic())
