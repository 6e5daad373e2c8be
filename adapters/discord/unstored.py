"""Discord messages that wait for the database, noted on disk so a killed process loses none.

Discord sends a message once. While the database is out of reach, a message waits in the
process (core/runtime/reconnect.py); if the process dies meanwhile, a new session's
read-back finds it again, but only in channels where the bot stored something before: a
member's first DM would be gone (Discord cannot list a bot's DMs). So a message that starts
waiting is noted here first, a small file per message under COMPANION_DATA_DIR, and its
note is removed once it is stored. The next session (this process's or the next one's on
this disk) reads back the channel of every note as well, then removes the notes it read.

    note(message_id, channel_id, guild_id)   a message starts waiting for the database
    done(message_id)                         it was stored (or given up): no note needed
    notes()                                  what is noted: (message, channel, server)
    forget(message_ids)                      those were read back

A disk that will not take the note is logged once; the message still waits in memory.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import NamedTuple

log = logging.getLogger(__name__)


class Note(NamedTuple):
    message_id: int
    channel_id: int
    guild_id: int | None  # None: a DM


class Unstored:
    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self._told = False

    def note(self, message_id: int, channel_id: int, guild_id: int | None) -> None:
        if self.directory is None:
            return
        path = self.directory / str(message_id)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            scratch = path.with_suffix(".new")
            scratch.write_text(f"{channel_id} {guild_id if guild_id is not None else '-'}\n")
            os.replace(scratch, path)
        except OSError as error:
            if not self._told:
                self._told = True
                log.warning(
                    "cannot note Discord messages that wait for the database in %s (%s): "
                    "one would be lost if this process stopped before the database is back",
                    self.directory,
                    error.strerror or error,
                )

    def done(self, message_id: int) -> None:
        self.forget([message_id])

    def notes(self) -> list[Note]:
        """The messages noted now, oldest first."""
        found: list[Note] = []
        if self.directory is None or not self.directory.is_dir():
            return found
        for path in self.directory.iterdir():
            try:
                channel, guild = path.read_text().split()
                server = None if guild == "-" else int(guild)
                found.append(Note(int(path.name), int(channel), server))
            except (OSError, ValueError):
                continue  # a half-written note (.new) or a stranger's file
        return sorted(found)

    def forget(self, message_ids: list[int]) -> None:
        if self.directory is None:
            return
        for message_id in message_ids:
            try:
                (self.directory / str(message_id)).unlink(missing_ok=True)
            except OSError:
                pass
