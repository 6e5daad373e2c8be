"""A model outage, in real time: is every question asked during it answered after it, in order?

    python bench/outage.py [--members 12] [--messages 3] [--outage 120]

Issue 28's finding, replayed from the outside: --members members each have one answered DM,
then the chat endpoint answers 503 to every call for --outage seconds; during the first
half of it each member sends --messages DMs, spread out. One `companion run` (Slack HTTP
mode, its own process, an embedded Postgres this script starts in a temporary directory)
serves them; the model is `tests.fake_openai.FakeOpenAI` (an echo of the member's words in
one send_message call, instant once it is back), Slack's Web API is `tests.fake_slack`.

Printed, from what the fake Slack was asked to post in each member's DM: the notices each
member got (the promise: one per outage), the questions answered, lost, answered twice and
answered out of order, how long after the endpoint came back the last answer came (the
outage's probes wait 5 s, doubling to 60 s, so up to about a minute), the model's state
in /readyz during the outage and after it, and the model calls that met the outage (a down
endpoint is probed, not hammered). The exit code is 1 when a promise is broken.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp

from bench.common import machine, revision, settings_block, table
from bench.fanout import post
from bench.load import echo_brain
from bench.slack_http import (
    EMBEDDERS,
    TAG,
    companion_env,
    companion_run,
    free_port,
    served_database,
    wait_listening,
)
from core.runtime.apologies import WAITING_NOTICE
from tests.fake_openai import FakeOpenAI
from tests.fake_slack import FakeSlack


async def model_state(http: aiohttp.ClientSession, ops_port: int) -> str:
    async with http.get(f"http://127.0.0.1:{ops_port}/readyz") as response:
        body = await response.json()
    return str(body.get("model", {}).get("state", "?"))


def per_member(posts: list[dict[str, Any]], members: list[str]) -> dict[str, list[str]]:
    """Each member's DM as posted: the tags answered ("m7") and "notice" for the notice."""
    seen: dict[str, list[str]] = {user: [] for user in members}
    for call in posts:
        user = str(call.get("channel", ""))[1:]
        text = str(call.get("text", ""))
        if user not in seen:
            continue
        found = TAG.search(text)
        seen[user].append(found.group(1) if found else "notice" if text == WAITING_NOTICE else text)
    return seen


async def until(done: Any, seconds: float) -> None:
    """Until `done()` is true, or `seconds` have passed."""
    for _ in range(int(seconds * 10)):
        if done():
            return
        await asyncio.sleep(0.1)


async def run(args: argparse.Namespace, data_dir: Path) -> int:
    async with served_database(data_dir, args.embedder) as (url, _):
        port, args.ops_port = free_port(), free_port()
        async with FakeOpenAI(echo_brain, embedding_dim=16) as fake, FakeSlack() as api:
            members = [f"U{a:05d}" for a in range(args.members)]
            for user in members:
                api.add_user(user)
            async with companion_run(companion_env(url, fake, api, port, args)) as proc:
                return await measure(args, proc, port, fake, api, members)


async def measure(
    args: argparse.Namespace,
    proc: Any,
    port: int,
    fake: FakeOpenAI,
    api: FakeSlack,
    members: list[str],
) -> int:
    events = f"http://127.0.0.1:{port}/slack/events"
    asked: dict[str, list[str]] = {user: [] for user in members}
    answer_times: list[float] = []

    async def on_call(method: str, args: dict[str, Any]) -> None:
        if method == "chat.postMessage" and TAG.search(str(args.get("text", ""))):
            answer_times.append(time.monotonic())

    api.on_call = on_call
    async with aiohttp.ClientSession() as http:
        await wait_listening(http, port, proc)
        await asyncio.gather(*(post(http, events, u, i + 1) for i, u in enumerate(members)))
        await until(lambda: len(api.called("chat.postMessage")) >= len(members), 60)
        before = len(api.called("chat.postMessage"))

        fake.down = 503
        began = time.monotonic()
        n = 1000  # after the first DMs' numbers: Slack's ts grows with them
        for round_ in range(args.messages):
            await asyncio.sleep(
                max(0.0, began + round_ * args.outage / 2 / args.messages - time.monotonic())
            )
            for user in members:
                n += 1
                asked[user].append(f"m{n}")
            await asyncio.gather(
                *(post(http, events, user, int(asked[user][-1][1:])) for user in members)
            )
        await asyncio.sleep(max(0.0, began + args.outage - 1 - time.monotonic()))
        during = await model_state(http, args.ops_port)
        calls_during = fake.down_calls
        await asyncio.sleep(max(0.0, began + args.outage - time.monotonic()))
        fake.down = None
        back = time.monotonic()

        wanted = sum(len(tags) for tags in asked.values())

        def all_answered() -> bool:
            dms = per_member(api.called("chat.postMessage")[before:], members)
            return sum(1 for tags in dms.values() for t in tags if t.startswith("m")) >= wanted

        await until(all_answered, args.wait)
        last = time.monotonic()
        first = min((t for t in answer_times if t >= back), default=last)
        await asyncio.sleep(3)  # anything posted twice arrives by now
        after = await model_state(http, args.ops_port)

    dms = per_member(api.called("chat.postMessage")[before:], members)
    notices = [dms[user].count("notice") for user in members]
    answers = {user: [t for t in dms[user] if t.startswith("m")] for user in members}
    lost = sum(len(set(asked[u]) - set(answers[u])) for u in members)
    twice = sum(len(answers[u]) - len(set(answers[u])) for u in members)
    out_of_order = sum(1 for u in members if answers[u] != [t for t in asked[u] if t in answers[u]])
    notice_first = sum(1 for u in members if dms[u] and dms[u][0] == "notice")
    strange = sum(1 for u in members for t in dms[u] if t != "notice" and not t.startswith("m"))
    print(
        settings_block(
            "Settings",
            {
                "machine": machine(),
                "code": revision(),
                "server": "companion run (Slack HTTP mode), its own process, embedded Postgres",
                "members": f"{len(members)}, {args.messages} DMs each in the outage's first half",
                "outage": f"every chat call answered 503 for {args.outage:g} s",
            },
        )
    )
    broken = lost or twice or out_of_order or strange or any(c != 1 for c in notices)
    print(
        table(
            ["measure", "value"],
            [
                ["questions asked during the outage", wanted],
                [
                    "notices per member, fewest / most (promise: 1)",
                    f"{min(notices)} / {max(notices)}",
                ],
                [
                    "members whose first post after it was the notice",
                    f"{notice_first} of {len(members)}",
                ],
                ["questions answered after it", wanted - lost],
                ["lost", lost],
                ["answered twice", twice],
                ["members answered out of order", out_of_order],
                ["other posts (an apology, an error)", strange],
                ["model calls that met the outage (probes included)", calls_during],
                ["/readyz model state during / after", f"{during} / {after}"],
                [
                    "first / last answer after the endpoint came back, s",
                    f"{first - back:.1f} / {last - back:.1f}",
                ],
            ],
        )
    )
    print(
        "outage: "
        + (
            "a promise was broken"
            if broken
            else "every question answered, in order, one notice each"
        )
    )
    return 1 if broken else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=12)
    parser.add_argument("--messages", type=int, default=3, help="DMs per member in the outage")
    parser.add_argument("--outage", type=float, default=120.0, help="seconds the model is down")
    parser.add_argument("--wait", type=float, default=150.0, help="seconds to wait after it")
    parser.add_argument("--embedder", choices=sorted(EMBEDDERS), default="endpoint")
    parser.add_argument("--window", type=int, default=8192, help="COMPANION_CONTEXT_WINDOW")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="companion-outage-") as data_dir:
        sys.exit(asyncio.run(run(args, Path(data_dir))))


if __name__ == "__main__":
    main()
