"""Reading back what Discord will not send again.

Discord sends each message once, over the gateway, and never again: not when the process
was down, not when it died between receiving a message and storing it. (A resumed session
is different: Discord replays what the session missed, so RESUMED needs nothing here.)
When a new session starts (READY: after a start, or after a session Discord could not
resume), the bot reads back the channels and DMs where it talked with members in the last
CATCH_UP_DAYS, from a little before the newest message it stored there; and the text
channels of its servers where it did not talk but that hold messages newer than the newest
message it stored anywhere (a first mention there), from a little before that one. It
handles what it finds exactly as if it had just arrived: the same filter (DMs, mentions,
replies to the bot), the same path. What is stored already is skipped, except a message
still held for its files (whoever fetched them died): taking it again fetches them. The
dedup key `discord:msg:<id>` makes a message read twice safe anyway. With shards, each
shard does this on each of its new sessions, for its own servers (and shard 0 the DMs): the
server of each channel is stored with its messages, so other channels are not looked up.

A message that was waiting for the database when its process died is read back too, from
the note that process left on disk (unstored.py), even in a DM where the bot never talked.

What stays out of reach: a DM where the bot never talked before (Discord cannot list a
bot's DMs) unless a note on this disk names it, threads where it never talked, channels
whose history the bot may not read, anything before the bot stored its first message,
messages older than CATCH_UP_DAYS, and beyond PER_CHANNEL messages in one channel.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, Protocol

import discord

from adapters.discord.messages import WHERE
from adapters.discord.tenants import EVERY
from adapters.discord.unstored import Unstored
from core.runtime.engine import Engine

log = logging.getLogger(__name__)
CATCH_UP_DAYS = 7
PER_CHANNEL = 200
MARGIN = timedelta(minutes=1)  # messages handled side by side may have been stored out of order


class Reader(Protocol):
    """The client as seen from here: its servers, fetch a channel, handle a message as it
    arrives."""

    @property
    def guilds(self) -> Sequence[discord.Guild]: ...

    def get_channel(self, channel_id: int, /) -> Any: ...

    async def fetch_channel(self, channel_id: int, /) -> Any: ...

    async def on_message(self, message: discord.Message, /) -> None: ...

    def reads_back(self, guild_id: int | None, /) -> bool: ...


def _guild(stored: str | None) -> int | None:
    """The server id stored in a message's meta; None for a direct message."""
    return int(stored) if stored and stored.isdigit() else None


async def catch_up(client: Reader, engine: Engine, unstored: Unstored) -> int:
    """Read back every channel the bot talked in lately (of the servers the client reads
    back: a shard's, with several), and the channel of every message noted as waiting for
    the database when a process stopped; returns how many messages it took."""
    since = engine.clock() - timedelta(days=CATCH_UP_DAYS)
    seen = await engine.seen.newest_per_place(EVERY, since, WHERE)
    newest = {c: n.position for c, n in seen.items() if client.reads_back(_guild(n.group))}
    if newest:  # a first mention in a channel of its servers since the newest it stored
        latest = max(newest.values())
        for channel_id in _active_elsewhere(client, latest, set(newest)):
            newest[channel_id] = latest
    noted = [n for n in unstored.notes() if client.reads_back(n.guild_id)]
    for note in noted:  # oldest first: each channel from its oldest note
        place = str(note.channel_id)
        newest[place] = min(newest.get(place, note.message_id), note.message_id)
    taken = 0
    for channel_id, message_id in newest.items():
        try:
            taken += await _read_back(client, engine, int(channel_id), message_id)
        except discord.HTTPException as error:  # gone, or no longer visible to the bot
            log.info("could not read back channel %s: %s", channel_id, error)
    unstored.forget([note.message_id for note in noted])
    if taken:
        log.info("caught up on %d messages in %d channels", taken, len(newest))
    return taken


def _active_elsewhere(client: Reader, latest: int, known: set[str]) -> list[str]:
    """Text channels of the bot's servers, not among `known`, that it may read and that hold
    a message newer than a little before `latest` (from the server's own channel list)."""
    start = discord.utils.snowflake_time(latest) - MARGIN
    found = []
    for guild in client.guilds:
        me = guild.me
        for channel in guild.text_channels:
            last = channel.last_message_id
            if str(channel.id) in known or last is None:
                continue
            if discord.utils.snowflake_time(last) < start:
                continue
            if me is not None and channel.permissions_for(me).read_message_history:
                found.append(str(channel.id))
    return found


async def _read_back(client: Reader, engine: Engine, channel_id: int, newest: int) -> int:
    channel = client.get_channel(channel_id) or await client.fetch_channel(channel_id)
    start = discord.utils.snowflake_time(newest) - MARGIN
    found = [m async for m in channel.history(after=start, limit=PER_CHANNEL, oldest_first=True)]
    known = await engine.seen.settled([f"discord:msg:{m.id}" for m in found])
    missed = [m for m in found if f"discord:msg:{m.id}" not in known]
    for message in missed:
        await client.on_message(message)  # its own filter drops what is not for the bot
    return len(missed)
