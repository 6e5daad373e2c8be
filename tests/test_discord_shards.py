"""Discord over shards split across processes, against the fake gateway.

Two `companion run` processes, COMPANION_DISCORD_SHARDS=0-1/4 and 2-3/4, one bot: each
identifies with its own shard ids, receives only the servers of its shards (Discord routes
server events by (guild_id >> 22) % 4, DMs to shard 0), answers exactly those messages,
once; the slash commands are synced once, by shard 0's process; /readyz lists each shard.
"""

from __future__ import annotations

import asyncio
import tracemalloc
from datetime import UTC, datetime
from typing import Any

import discord
import pytest
from sqlalchemy import text

from adapters.common import Services
from adapters.discord import build_discord_client
from adapters.discord.shards import ShardedClient
from bot.settings import Settings
from core.errors import ConfigError
from core.events import EventKind, InboundEvent
from tests.conftest import cli_env
from tests.fake_discord import (
    FakeDiscord,
    guild,
    member,
    message,
    snowflake,
    text_channel,
    user,
)
from tests.test_readiness import get, lines, start, stop, until_ready_state
from tests.test_run import free_port

BOT = user(1_500_000_000_000_000_010, "Companion", bot=True)
APP_ID = 1_500_000_000_000_000_011
ANN = 1_500_000_000_000_000_020
BOB = 1_500_000_000_000_000_021  # talks only in the server of shard 3
COUNT = 4


def server(shard: int, of: int = COUNT) -> tuple[int, int, dict[str, Any]]:
    """A server whose events go to `shard` of `of`: (guild id, channel id, GUILD_CREATE)."""
    guild_id = ((1_000 * of + shard) << 22) | 7  # (guild_id >> 22) % of == shard
    channel_id = snowflake()
    channels = [text_channel(channel_id, guild_id, "general")]
    members = [member(ANN, "Ann"), member(BOB, "Bob"), member(int(BOT["id"]), "Companion")]
    return guild_id, channel_id, guild(guild_id, ANN, channels, [], members, [])


def mention(guild_id: int, channel_id: int, words: str, who: int = ANN) -> dict[str, Any]:
    name = "Ann" if who == ANN else "Bob"
    return message(
        user(who, name),
        channel_id,
        f"<@{BOT['id']}> {words}",
        guild_id=guild_id,
        author_member=member(who, name),
        mentions=[BOT],
    )


def shard_env(fake, pg_url, schema, api, port, token: str, **extra: str) -> dict:
    """`companion run` on the fake Discord `api` as bot `token`, serving /readyz on `port`."""
    return cli_env(
        fake,
        pg_url,
        schema,
        DISCORD_TOKEN=token,
        DISCORD_API_URL=api.api_url,
        DISCORD_GATEWAY_URL=api.gateway_url,
        COMPANION_HTTP_HOST="127.0.0.1",
        COMPANION_HTTP_PORT=str(port),
        **extra,
    )


def shard_states(body: dict[str, Any]) -> dict[str, str]:
    platforms = body.get("platforms", {})
    return {name: p["state"] for name, p in platforms.items() if name.startswith("Discord shard")}


async def dm_home(sessions, who: int) -> str | None:
    async with sessions() as session:
        return await session.scalar(
            text(
                "SELECT t.key FROM dm_homes h JOIN tenants t ON t.id = h.tenant_id "
                "WHERE h.external_id = :who"
            ),
            {"who": str(who)},
        )


async def test_two_processes_with_disjoint_shards_answer_exactly_their_servers(
    fake, pg_url, schema, sessions
):
    servers = {shard: server(shard) for shard in range(COUNT)}
    async with FakeDiscord(BOT, APP_ID) as api:
        api.guilds = {guild_id: payload for guild_id, _, payload in servers.values()}
        ports = {"a": free_port(), "b": free_port()}
        slices = {"a": "0-1/4", "b": "2-3/4"}
        procs = {}
        for name in ("a", "b"):
            env = shard_env(
                fake,
                pg_url,
                schema,
                api,
                ports[name],
                f"token-{name}",
                COMPANION_DISCORD_SHARDS=slices[name],
            )
            procs[name] = await start(env)
        errors: dict[str, str] = {}
        try:
            ready = {
                name: await until_ready_state(ports[name], lambda status, body: status == 200)
                for name in ("a", "b")
            }
            assert shard_states(ready["a"]) == {
                "Discord shard 0/4": "connected",
                "Discord shard 1/4": "connected",
            }
            assert shard_states(ready["b"]) == {
                "Discord shard 2/4": "connected",
                "Discord shard 3/4": "connected",
            }
            assert sorted(api.identified) == [
                (0, 4, "token-a"),
                (1, 4, "token-a"),
                (2, 4, "token-b"),
                (3, 4, "token-b"),
            ]

            for shard, (guild_id, channel_id, _) in servers.items():
                went = await api.dispatch(
                    "MESSAGE_CREATE", mention(guild_id, channel_id, f"hello shard {shard}")
                )
                assert went == shard
            dm_channel = snowflake()
            api.dm_channels[ANN] = dm_channel
            dm = message(user(ANN, "Ann"), dm_channel, "a quiet word")
            assert await api.dispatch("MESSAGE_CREATE", dm) == 0

            def answered() -> bool:
                done = [api.sent(channel) for _, channel, _ in servers.values()]
                return all(done) and bool(api.sent(dm_channel))

            await api.wait_for(answered, within=60)

            # Bob talks in shard 3's server only (process b), then DMs: shard 0 (process a)
            # takes the DM into the memory of the server where he talked.
            guild_3, channel_3, _ = servers[3]
            await api.dispatch("MESSAGE_CREATE", mention(guild_3, channel_3, "bob here", BOB))
            await api.wait_for(lambda: len(api.sent(channel_3)) == 2, within=60)
            bob_dm = snowflake()
            api.dm_channels[BOB] = bob_dm
            await api.dispatch("MESSAGE_CREATE", message(user(BOB, "Bob"), bob_dm, "psst"))
            await api.wait_for(lambda: api.sent(bob_dm), within=60)
            await asyncio.sleep(1)  # a second answer, were there one, would be in by now
        finally:
            for name, proc in procs.items():
                code, errors[name] = await stop(proc)
                assert code == 0, errors[name]
    for name in errors:
        assert "Traceback" not in errors[name], errors[name][
            errors[name].find("Traceback") - 300 :
        ][:3000]

    owner = {0: "a", 1: "a", 2: "b", 3: "b"}
    for shard, (_, channel_id, _) in servers.items():
        calls = api.sent(channel_id)[:1]
        assert [c.body["content"] for c in calls] == [f"You said: hello shard {shard}"]
        assert [c.token for c in calls] == [f"Bot token-{owner[shard]}"]
    assert [(c.body["content"], c.token) for c in api.sent(servers[3][1])[1:]] == [
        ("You said: bob here", "Bot token-b")
    ]
    assert [(c.body["content"], c.token) for c in api.sent(bob_dm)] == [
        ("You said: psst", "Bot token-a")
    ]
    assert await dm_home(sessions, BOB) == f"discord:{servers[3][0]}"
    assert [(c.body["content"], c.token) for c in api.sent(dm_channel)] == [
        ("You said: a quiet word", "Bot token-a")
    ]
    synced = api.find("PUT", f"/applications/{APP_ID}/commands")
    assert [c.token for c in synced] == ["Bot token-a"]  # once, by shard 0's process


async def test_auto_runs_every_shard_discord_recommends_at_the_configured_gateway(
    engine, fake, pg_url, schema, sessions
):
    """COMPANION_DISCORD_SHARDS=auto: the count from GET /gateway/bot, all in one process,
    connected at DISCORD_GATEWAY_URL (here the fake; the address Discord gives is a dead one,
    as it would be behind a gateway proxy). A first DM while a shard is still on its way
    belongs to the server where the member talked, though that server is not loaded yet."""
    servers = {shard: server(shard, of=3) for shard in range(3)}
    await engine.agent(f"discord:{servers[2][0]}", str(BOB), "Bob")  # talked there before
    async with FakeDiscord(BOT, APP_ID) as api:
        api.guilds = {guild_id: payload for guild_id, _, payload in servers.values()}
        api.recommended_shards = 3
        api.bot_gateway_url = f"ws://127.0.0.1:{free_port()}/nowhere"
        api.held.add(2)  # shard 2 gets its READY when the test says so
        port = free_port()
        env = shard_env(
            fake, pg_url, schema, api, port, "token-auto", COMPANION_DISCORD_SHARDS="auto"
        )
        proc = await start(env)
        try:
            two = {"Discord shard 0/3": "connected", "Discord shard 1/3": "connected"}
            early = await until_ready_state(
                port, lambda status, body: two.items() <= shard_states(body).items(), 60
            )
            assert shard_states(early)["Discord shard 2/3"] == "starting" and not early["ready"]
            bob_dm = snowflake()
            api.dm_channels[BOB] = bob_dm
            await api.dispatch("MESSAGE_CREATE", message(user(BOB, "Bob"), bob_dm, "psst"))
            await api.wait_for(lambda: api.sent(bob_dm), within=60)
            await api.release(2)

            ready = await until_ready_state(port, lambda status, body: status == 200, 60)
            assert shard_states(ready) == {f"Discord shard {n}/3": "connected" for n in range(3)}
            assert sorted(api.identified) == [(n, 3, "token-auto") for n in range(3)]

            for shard, (guild_id, channel_id, _) in servers.items():
                went = await api.dispatch(
                    "MESSAGE_CREATE", mention(guild_id, channel_id, f"hello shard {shard}")
                )
                assert went == shard
            dm_channel = snowflake()
            api.dm_channels[ANN] = dm_channel
            assert (
                await api.dispatch("MESSAGE_CREATE", message(user(ANN, "Ann"), dm_channel, "hi"))
                == 0
            )

            def answered() -> bool:
                done = [api.sent(channel) for _, channel, _ in servers.values()]
                return all(done) and bool(api.sent(dm_channel))

            await api.wait_for(answered, within=60)
            await asyncio.sleep(1)  # a second answer, were there one, would be in by now
        finally:
            code, err = await stop(proc)
    assert code == 0 and "Traceback" not in err, err[err.find("Traceback") - 300 :][:3000]
    for shard, (_, channel_id, _) in servers.items():
        assert api.texts(channel_id) == [f"You said: hello shard {shard}"]
    assert api.texts(dm_channel) == ["You said: hi"]
    assert api.texts(bob_dm) == ["You said: psst"]
    assert await dm_home(sessions, BOB) == f"discord:{servers[2][0]}"
    assert len(api.find("PUT", f"/applications/{APP_ID}/commands")) == 1


async def test_auto_waits_out_an_outage_of_discords_api_for_the_shard_count(fake, pg_url, schema):
    """Discord's API answers 503 to the first asks for the recommended count: Discord is
    `retrying` with that reason in /readyz (not refused for good), then every shard connects
    and answers."""
    servers = {shard: server(shard, of=2) for shard in range(2)}
    async with FakeDiscord(BOT, APP_ID) as api:
        api.guilds = {guild_id: payload for guild_id, _, payload in servers.values()}
        api.recommended_shards = 2
        api.gateway_bot_down = 2
        port = free_port()
        env = shard_env(
            fake, pg_url, schema, api, port, "token-auto", COMPANION_DISCORD_SHARDS="auto"
        )
        proc = await start(env)
        try:

            def asking_again(status: int, body: dict[str, Any]) -> bool:
                discord = body.get("platforms", {}).get("Discord", {})
                return discord.get("state") == "retrying"

            waiting = await until_ready_state(port, asking_again, 60)
            assert "shard count" in waiting["platforms"]["Discord"]["detail"]
            assert "503" in waiting["platforms"]["Discord"]["detail"] and not waiting["ready"]
            ready = await until_ready_state(port, lambda status, body: status == 200, 60)
            assert shard_states(ready) == {f"Discord shard {n}/2": "connected" for n in range(2)}
            assert api.gateway_bot_down == 0
            guild_id, channel_id, _ = servers[1]
            await api.dispatch("MESSAGE_CREATE", mention(guild_id, channel_id, "still here?"))
            await api.wait_for(lambda: api.sent(channel_id), within=60)
        finally:
            code, err = await stop(proc)
    assert code == 0 and "Traceback" not in err, err[err.find("Traceback") - 300 :][:3000]
    assert api.texts(channel_id) == ["You said: still here?"]
    assert sorted(api.identified) == [(n, 2, "token-auto") for n in range(2)]


async def test_a_shard_that_drops_is_retrying_then_connected_and_reads_back_what_it_missed(
    fake, pg_url, schema
):
    """One process, shards 0-1/2. Shard 1's connection drops and Discord makes it start a new
    session (its resume is refused): /readyz says shard 1 is retrying and the process not
    ready while it is away, then connected and ready again; a mention posted meanwhile, which
    the gateway never sends, is read back and answered once."""
    servers = {shard: server(shard, of=2) for shard in range(2)}
    guild_1, channel_1, _ = servers[1]
    async with FakeDiscord(BOT, APP_ID) as api:
        api.guilds = {guild_id: payload for guild_id, _, payload in servers.values()}
        port = free_port()
        env = shard_env(
            fake, pg_url, schema, api, port, "token-one", COMPANION_DISCORD_SHARDS="0-1/2"
        )
        proc = await start(env)
        try:
            await until_ready_state(port, lambda status, body: status == 200, 60)
            heard = mention(guild_1, channel_1, "before the drop")
            api.history[channel_1] = [heard]
            await api.dispatch("MESSAGE_CREATE", heard)
            await api.wait_for(lambda: api.sent(channel_1), within=60)

            api.held.add(1)
            await api.drop(1)
            away = await until_ready_state(
                port,
                lambda status, body: (
                    shard_states(body).get("Discord shard 1/2") == "retrying" and status == 503
                ),
            )
            assert shard_states(away)["Discord shard 0/2"] == "connected"
            assert "Discord shard 1/2 retrying" in away["reason"]
            api.history[channel_1].append(mention(guild_1, channel_1, "while you were away"))
            await api.wait_for(lambda: len(api.identified) == 3, within=30)
            await api.release(1)

            back = await until_ready_state(port, lambda status, body: status == 200, 60)
            assert shard_states(back) == {
                "Discord shard 0/2": "connected",
                "Discord shard 1/2": "connected",
            }
            await api.wait_for(lambda: len(api.sent(channel_1)) == 2, within=60)
            await asyncio.sleep(1)  # a second answer, were there one, would be in by now
        finally:
            code, err = await stop(proc)
    assert code == 0 and "Traceback" not in err, err[err.find("Traceback") - 300 :][:3000]
    assert api.texts(channel_1) == [
        "You said: before the drop",
        "You said: while you were away",
    ]
    assert [shard for shard, _, _ in api.identified] == [0, 1, 1]


async def stored(engine, sessions, guild_id: int | None, channel_id: int, home: int) -> None:
    """A message of Ann's that an earlier process stored and answered."""
    message_id = snowflake()
    meta = {
        "platform": "discord",
        "guild_id": str(guild_id) if guild_id else None,
        "channel_id": str(channel_id),
        "message_id": str(message_id),
    }
    scope = await engine.agent(f"discord:{home}", str(ANN), "Ann")
    event = InboundEvent(EventKind.USER_MESSAGE, "earlier", f"discord:msg:{message_id}", meta)
    event_id = await engine.submit(scope, event)
    async with sessions() as session, session.begin():
        await session.execute(
            text("UPDATE events SET status = 'done' WHERE id = :id"), {"id": event_id}
        )


async def test_each_shard_reads_back_only_its_own_channels(
    clock, engine, fake, members, pg_url, schema, sessions
):
    """After a start, shards 0-1/4 read back what was missed in their servers and (shard 0)
    the DMs, once each; a channel of another process's shard is not even looked up, so a
    process with many shards does not spend Discord's rate limit on channels it skips."""
    clock.now = datetime.now(UTC)  # stored lately, as the process's clock sees it
    servers = {shard: server(shard) for shard in (0, 1, 3)}
    dm_channel = snowflake()
    await stored(engine, sessions, servers[1][0], servers[1][1], home=servers[1][0])
    await stored(engine, sessions, servers[3][0], servers[3][1], home=servers[3][0])
    await stored(engine, sessions, None, dm_channel, home=servers[0][0])
    # ... having recorded, at her first DM, that her DMs belong to shard 0's server
    await members.dm_homes.resolve("discord", str(ANN), [f"discord:{servers[0][0]}"], None)
    async with FakeDiscord(BOT, APP_ID) as api:
        api.guilds = {guild_id: payload for guild_id, _, payload in servers.values()}
        api.dm_channels[ANN] = dm_channel
        for shard, (guild_id, channel_id, _) in servers.items():
            api.channels[channel_id] = text_channel(channel_id, guild_id, "general")
            api.history[channel_id] = [mention(guild_id, channel_id, f"missed on shard {shard}")]
        api.history[dm_channel] = [message(user(ANN, "Ann"), dm_channel, "missed in a DM")]
        port = free_port()
        env = shard_env(
            fake, pg_url, schema, api, port, "token-a", COMPANION_DISCORD_SHARDS="0-1/4"
        )
        proc = await start(env)
        try:
            await until_ready_state(port, lambda status, body: status == 200, 60)
            await api.wait_for(lambda: api.sent(servers[1][1]) and api.sent(dm_channel), 60)
            await asyncio.sleep(1)  # a second answer, were there one, would be in by now
        finally:
            code, err = await stop(proc)
    assert code == 0 and "Traceback" not in err, err[err.find("Traceback") - 300 :][:3000]
    assert api.texts(servers[1][1]) == ["You said: missed on shard 1"]
    assert api.texts(dm_channel) == ["You said: missed in a DM"]
    assert api.texts(servers[3][1]) == []
    other = servers[3][1]
    assert api.find("GET", f"/channels/{other}(/messages)?") == []
    assert len(api.find("GET", f"/channels/{dm_channel}/messages")) == 1
    assert len(api.find("GET", f"/channels/{dm_channel}")) <= 1


@pytest.mark.parametrize(
    ("shards", "code", "reason", "says"),
    [
        (None, 4011, "Sharding required.", "set COMPANION_DISCORD_SHARDS"),
        ("0-1/2", 4011, "Sharding required.", "COUNT of 2 is too small"),
        ("0-1/2", 4010, "Invalid shard.", "refused shard"),
    ],
)
async def test_a_shard_count_discord_refuses_is_one_clear_line_and_not_ready(
    fake, pg_url, schema, shards, code, reason, says
):
    """Discord closes the gateway with 4011 (this many servers need more shards) or 4010
    (an invalid shard): that is said once, in words that name the setting to change, and
    the process stays up but not ready instead of trying again and again."""
    async with FakeDiscord(BOT, APP_ID) as api:
        guild_id, _, payload = server(0, of=2)
        api.guilds = {guild_id: payload}
        api.refuse_identify = (code, reason)
        port = free_port()
        extra = {"COMPANION_DISCORD_SHARDS": shards} if shards else {}
        env = shard_env(fake, pg_url, schema, api, port, "token-big", **extra)
        proc = await start(env)
        try:
            body = await until_ready_state(
                port,
                lambda status, body: (
                    body.get("platforms", {}).get("Discord", {}).get("state") == "refused"
                ),
                60,
            )
            assert not body["ready"] and f"({code}" in body["platforms"]["Discord"]["detail"]
            assert says in body["platforms"]["Discord"]["detail"]
            tries = len(api.identified)
            await asyncio.sleep(6)  # discord.py would identify again within 5 s
            assert len(api.identified) == tries
            assert (await get(port, "/healthz"))[0] == 200
        finally:
            code_, err = await stop(proc)
    assert code_ == 0 and "Traceback" not in err, err[err.find("Traceback") - 300 :][:3000]
    errors = [line["message"] for line in lines(err) if line["level"] == "ERROR"]
    assert errors == [f"Discord: {body['platforms']['Discord']['detail']}"]


async def test_shards_identify_at_the_pace_discord_gives(engine, members):
    """GET /gateway/bot's max_concurrency: Discord takes that many IDENTIFYs per 5 s, shard
    s in bucket s % max_concurrency. Shards 0-3 with 2 buckets: 0 and 1 go at once, 2 and 3
    wait for the window of 0 and 1; a shard that starts over after the window goes at once.
    Where Discord does not say (its API down), one bucket: one IDENTIFY per window."""
    base = discord.http.Route.BASE
    async with FakeDiscord(BOT, APP_ID) as api:
        api.max_concurrency = 2
        client = build_discord_client(
            Services(engine, members),
            api_url=api.api_url,
            sharded=True,
            shard_ids=(0, 1, 2, 3),
            shard_count=4,
        )
        assert isinstance(client, ShardedClient)
        try:
            await client.login("token-pace")
            client.max_concurrency = await client._concurrency()
            assert client.max_concurrency == 2
            client.identify_seconds = window = 1.0
            loop = asyncio.get_running_loop()
            began, went = loop.time(), {}

            async def identify(shard: int) -> None:
                await client.before_identify_hook(shard, initial=shard == 0)
                went[shard] = loop.time() - began

            await asyncio.gather(*(identify(shard) for shard in range(4)))
            assert went[0] < window / 2 and went[1] < window / 2, went
            assert window * 0.95 <= went[2] < window * 2 and window * 0.95 <= went[3], went
            await asyncio.sleep(window)
            again = loop.time()
            await client.before_identify_hook(1)
            assert loop.time() - again < window / 2

            api.gateway_bot_down = 1
            assert await client._concurrency() == 1
        finally:
            await client.close()
            discord.http.Route.BASE = base


@pytest.mark.parametrize("raw", ["4/4", "0-3", "x/8", "1-0/0", "/4", "0,3-1/8", "2-1/4"])
def test_a_bad_shard_setting_is_one_clear_line(raw):  # "/4": a pod without its index label
    with pytest.raises(ConfigError) as error:
        Settings.from_env({"COMPANION_DISCORD_SHARDS": raw})
    assert "COMPANION_DISCORD_SHARDS" in str(error.value) and "\n" not in str(error.value)


def test_a_shard_range_far_past_the_count_is_refused_before_it_is_built():
    """A typo such as 0-99999999999/8 is refused at once, not after filling memory with ids:
    refusing a 3-million range takes less than a megabyte."""
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError, match="ids from 0 to COUNT-1"):
            Settings.from_env({"COMPANION_DISCORD_SHARDS": "0-2999999/8"})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000


def test_shard_settings_read_as_discord_means_them():
    shards = Settings.from_env({"COMPANION_DISCORD_SHARDS": "0-2,5/8"}).discord_shards
    assert shards is not None and (shards.ids, shards.count) == ((0, 1, 2, 5), 8)
    auto = Settings.from_env({"COMPANION_DISCORD_SHARDS": "auto"}).discord_shards
    assert auto is not None and (auto.ids, auto.count) == (None, None)
    assert Settings.from_env({}).discord_shards is None
