"""Progress of long operator commands (import, reembed) on stderr, and what a command is
doing before its first line (`Starting`).

On a terminal: one line redrawn in place, with a bar, counts and a percentage. Elsewhere
(logs, CI, pipes): a plain line now and then (every 10%), never control characters.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, TextIO

WIDTH = 30


class Progress:
    def __init__(self, label: str, stream: TextIO | None = None, every: float = 0.1) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every = every
        self._shown = -1.0
        self._last_draw = 0.0

    def __call__(self, done: int, total: int) -> None:
        share = done / total if total else 1.0
        if self.tty:
            now = time.monotonic()
            if done < total and now - self._last_draw < 0.1:
                return  # redraw at most ten times a second
            self._last_draw = now
            filled = int(share * WIDTH)
            bar = "█" * filled + "·" * (WIDTH - filled)
            end = "\n" if done >= total else ""
            self.stream.write(f"\r{self.label} {bar} {done:,}/{total:,} ({share:.0%}){end}")
        elif share >= self._shown + self.every or (done >= total and self._shown < 1.0):
            self._shown = share
            self.stream.write(f"{self.label}: {done:,} of {total:,} ({share:.0%})\n")
        self.stream.flush()


class Starting:
    """A dim line on a terminal saying what a command is doing until its first output:
    written without a newline, and erased by the first write to stdout, stderr or the log
    (`sys.stdout` and `sys.stderr` become `_Erasing` streams), so nothing of it stays.
    Nothing is written where `stream` is not a terminal: a script reads only the output."""

    def __init__(self, stream: TextIO, text: str) -> None:
        self.stream = stream
        self.shown = stream.isatty()
        if not self.shown:
            return
        stream.write(f"\033[2m{text}\033[0m\r")
        stream.flush()
        stderr = sys.stderr
        sys.stdout, sys.stderr = _Erasing(sys.stdout, self), _Erasing(stderr, self)
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler) and handler.stream is stderr:
                handler.setStream(sys.stderr)

    def erase(self) -> None:
        if self.shown:
            self.shown = False
            self.stream.write("\r\033[K")
            self.stream.flush()


class _Erasing:
    """A stream whose first write erases the `Starting` line first."""

    def __init__(self, stream: TextIO, line: Starting) -> None:
        self._stream, self._line = stream, line

    def write(self, text: str) -> int:
        if text:
            self._line.erase()
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
