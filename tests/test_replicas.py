"""Replicas behind a load balancer: three `companion run` processes in Slack HTTP mode, one
Postgres, a round-robin proxy in front; one process is killed (SIGKILL) mid-way and started
again. Every acknowledged event is answered, in each member's order, and once as the member
sees it: a reply the killed process had posted but not yet marked sent when it died is found
in the channel by whoever finishes its work, not posted again (the process that posted each
copy is known from its token). Then three schedulers tick at the same moment: each due
opener goes out once.

bench/replicas.py runs the same with 1,000 events from 100 members.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import aiohttp
from sqlalchemy import text

from tests.conftest import cli_env, companion
from tests.fake_slack import FakeSlack
from tests.replicas import (
    Replicas,
    RoundRobin,
    members,
    outcome,
    until_acknowledged,
    wait_for_answers,
)
from tests.test_run import free_port

MEMBERS, EACH = 12, 8  # 96 events


async def test_three_replicas_answer_every_acknowledged_event_once_through_a_kill(
    fake, pg_url, schema, sessions
):
    people = members(MEMBERS, EACH)
    async with FakeSlack() as api:
        replicas = Replicas(cli_env(fake, pg_url, schema), api, [free_port() for _ in range(3)])
        for port in replicas.ports:
            await replicas.start(port)
        try:
            async with RoundRobin(replicas.ports) as proxy, aiohttp.ClientSession() as http:
                url = f"{proxy.url}/slack/events"
                going = asyncio.Event()
                going.set()
                talking = [asyncio.create_task(m.talk(http, url, going)) for m in people]
                victim = replicas.ports[1]
                total = MEMBERS * EACH
                await until_acknowledged(people, total // 3, talking, 120)
                replicas.kill(victim)  # mid-way, turns in flight
                await until_acknowledged(people, total // 2, talking, 120)
                await replicas.start(victim)  # back; it resumes what it left
                await asyncio.wait_for(asyncio.gather(*talking), 300)
            answered = await wait_for_answers(api, people, seconds=120)
            result = outcome(api, people, replicas.killed)
            assert answered, (result, replicas.log(victim))
            assert result["acknowledged"] == result["events"] == total
            assert result["missing"] == 0 and result["apologies"] == 0, result
            assert result["duplicated"] == 0, result["duplicates"]
            assert result["members out of order"] == 0, result["first out of order"]
            assert result["answers"] == total
            assert result["unexpected"] == []

            # One tick per due opener, whichever of three schedulers gets there first.
            now = datetime(2030, 1, 1, 12, 0)
            async with sessions() as session, session.begin():
                await session.execute(text("UPDATE agents SET next_opener_at = :now"), {"now": now})
            before = len(api.called("chat.postMessage"))
            env = {
                **cli_env(fake, pg_url, schema),
                "SLACK_BOT_TOKEN": "xoxb-test",  # FakeSlack's token of workspace TEAM
                "SLACK_API_URL": api.base_url,
            }
            at = (now + timedelta(minutes=1)).isoformat()
            ticks = await asyncio.gather(
                *(companion(env, "tick", "--now", at, "--apply") for _ in range(3))
            )
            assert all(run.code == 0 for run in ticks), ticks
            openers = api.called("chat.postMessage")[before:]
            assert sorted(p["channel"] for p in openers) == sorted(f"D{m.user}" for m in people)
            assert all(p["text"].startswith("Hi! You told me") for p in openers)
        finally:
            codes = await replicas.stop_all()
    assert all(code == 0 for port, code in codes.items()), {p: replicas.log(p) for p in codes}
