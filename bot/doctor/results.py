"""What each check of `companion doctor` finds: one line, `ok`, `warn` or `FAIL`."""

from __future__ import annotations

from dataclasses import dataclass

from bot.log_filters import redact

TIMEOUT = 15.0  # seconds for one check's network call


@dataclass(frozen=True)
class Result:
    level: str  # ok | warn | FAIL
    text: str

    @property
    def ok(self) -> bool:
        return self.level != "FAIL"

    def line(self) -> str:
        return f"{self.level:<4} {self.text}"


def ok(text: str) -> Result:
    return Result("ok", text)


def warn(text: str) -> Result:
    return Result("warn", text)


def fail(text: str) -> Result:
    return Result("FAIL", text)


def why(error: BaseException) -> str:
    """An error in one short line, without the driver's wrapping or any secret."""
    error = getattr(error, "orig", None) or error  # SQLAlchemy wraps the driver's error
    words = str(error).strip().splitlines()
    return redact(f"{type(error).__name__}: {words[0] if words else 'no details'}")
