"""Slack's Socket Mode client reconnects by itself; `companion run` says when it is away.

Found: the watch called the client's `is_connected()` without awaiting it (it is a coroutine
in slack_sdk's asyncio clients), so a dropped connection always read as connected, Slack was
asked who the bot is every five seconds, and an unawaited-coroutine warning reached stderr.
"""

from __future__ import annotations

import asyncio

from slack_sdk.socket_mode.aiohttp import SocketModeClient

from bot.platforms import watch_socket_mode


async def test_a_dropped_socket_mode_connection_and_its_return_are_each_said_once():
    client = SocketModeClient(app_token="xapp-1-test")  # never connected: it is away
    reports: list[tuple[str, str]] = []
    asked: list[int] = []

    async def identity() -> str:
        asked.append(1)
        return "@companion in workspace Test (T1), Socket Mode"

    watch = asyncio.create_task(
        watch_socket_mode(client, identity, lambda *said: reports.append(said), every=0.01)
    )
    try:
        await asyncio.sleep(0.2)
        assert reports == [("retrying", "the Socket Mode connection dropped; reconnecting")]

        async def connected() -> bool:
            return True

        client.is_connected = connected  # type: ignore[method-assign]
        await asyncio.sleep(0.2)
        assert reports[1:] == [("connected", "@companion in workspace Test (T1), Socket Mode")]
        assert len(asked) == 1  # asked once, on the way back
    finally:
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        await client.close()
