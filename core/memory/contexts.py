"""Main contexts kept between turns, in this process: the FIFO queue is read once, not per turn.

A `Snapshot` is what a turn leaves behind: the queue's entries (each message rendered and
counted once, when stored), their token sum and the summary, as of one `context_version`
of the agent row. The next turn of that agent in this process starts from it instead of
reading and rendering the whole queue again, if the row still has that version and the
queue was counted under the same basis. Every transaction that changes the queue or the
summary moves the version on (`AgentStore`), whichever process or path made it (a turn, a
message kept without one, an import), so a copy is never used after such a change.

Snapshots are published only after the turn's transaction commits, and never replace a
newer one. The cache holds at most `max_messages` entries in all; the agents used least
recently leave first.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from core.memory.prompt import Entry
from core.models import Summary

MAX_CACHED_MESSAGES = 100_000


@dataclass(frozen=True)
class Snapshot:
    """One agent's main context as a committed transaction left it."""

    version: int  # agents.context_version it is valid for
    basis: str  # how its entries were counted (core.memory.prompt.count_basis)
    entries: tuple[Entry, ...]
    queue_tokens: int  # the entries' tokens, added up (unscaled)
    summary: Summary | None
    summary_shown: tuple[dict[str, Any], int] | None  # the summary's message and tokens


class ContextCache:
    def __init__(self, max_messages: int = MAX_CACHED_MESSAGES) -> None:
        self.max_messages = max_messages
        self._snapshots: OrderedDict[int, Snapshot] = OrderedDict()
        self._size = 0
        self.hits = 0
        self.misses = 0

    def get(self, agent_id: int, version: int, basis: str) -> Snapshot | None:
        """The agent's snapshot if it is valid for this version of its row and basis."""
        snapshot = self._snapshots.get(agent_id)
        if snapshot is None or snapshot.version != version or snapshot.basis != basis:
            self.misses += 1
            return None
        self._snapshots.move_to_end(agent_id)
        self.hits += 1
        return snapshot

    def put(self, agent_id: int, snapshot: Snapshot) -> None:
        """Keep a committed snapshot, unless a newer one is already kept."""
        old = self._snapshots.get(agent_id)
        if old is not None:
            if old.version > snapshot.version:
                return
            self._size -= len(old.entries)
        self._snapshots[agent_id] = snapshot
        self._snapshots.move_to_end(agent_id)
        self._size += len(snapshot.entries)
        while self._size > self.max_messages and len(self._snapshots) > 1:
            _, gone = self._snapshots.popitem(last=False)
            self._size -= len(gone.entries)

    def drop(self, agent_id: int) -> None:
        old = self._snapshots.pop(agent_id, None)
        if old is not None:
            self._size -= len(old.entries)
