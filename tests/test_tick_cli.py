"""Operators' view of openers: `companion openers list` and `companion tick --now`, end to
end through the CLI (run in this process), delivering on Slack or waiting for a terminal
member; `tick --now` is a dry run unless `--apply`."""

from datetime import datetime, timedelta

from sqlalchemy import select

from core.events import EventKind, InboundEvent
from core.models import Agent, User
from tests.conftest import cli_env, run_cli
from tests.fake_openai import default_brain, last, say
from tests.fake_slack import FakeSlack


def opener_brain(body):
    if "[scheduled interrupt] conversation opener" in str(last(body)):
        system = body["messages"][0]["content"]
        human = system.split("<human", 1)[1].split(">", 1)[1].split("</human>", 1)[0]
        fact = human.strip().splitlines()[-1]
        return say(f"Thinking of you! ({fact})")
    return default_brain(body)


async def companion(env, *args, stdin=""):
    run = await run_cli(env, *args, stdin=stdin)
    assert run.code == 0, run.err
    return run.out


def due_time(listing: str, user: str) -> datetime:
    line = next(line for line in listing.splitlines() if f"\t{user}\t" in line)
    return datetime.fromisoformat(line.split("\t")[2].replace("Z", "+00:00"))


async def exact_due(sessions, user: str) -> datetime:
    """The member's opener time to the microsecond (the listing says the minute): a tick a
    minute or two after the listed time could fall past the start of the quiet hours, where
    the opener is moved to the morning instead of sent (red once at 22:01Z)."""
    async with sessions() as session:
        due = await session.scalar(
            select(Agent.next_opener_at)
            .join(User, User.id == Agent.user_id)
            .where(User.external_id == user)
        )
    assert due is not None, f"no opener scheduled for {user}"
    return due


async def test_opener_waits_for_a_terminal_member(fake, pg_url, schema, sessions):
    fake.brain = opener_brain
    env = cli_env(fake, pg_url, schema)
    await companion(env, "chat", "--user", "ana", stdin="remember that I am learning Greek\n")
    listing = await companion(env, "openers", "list")
    assert "local\tana\t" in listing and "after their last message" in listing
    header, *rows = listing.splitlines()
    assert header == "tenant\tuser\tdue (UTC)\tlocal time\tstate\twhy"
    assert all(len(row.split("\t")) == len(header.split("\t")) for row in rows)
    due = await exact_due(sessions, "ana")
    assert due_time(listing, "ana") <= due
    assert await companion(env, "openers", "list", "--due") == "no openers scheduled\n"
    now = due.isoformat()
    assert "ana" in await companion(env, "openers", "list", "--due", "--now", now)
    report = await companion(env, "tick", "--now", now, "--apply")
    assert "1 openers (0 sent, 0 silent, 1 waiting for the member)" in report
    shown = await companion(env, "chat", "--user", "ana")
    assert shown.strip() == "Thinking of you! (I am learning Greek)"
    again = await companion(env, "tick", "--now", now, "--apply")
    assert "0 openers" in again, "the unanswered opener is not repeated"


async def test_tick_after_downtime_says_it_re_spread_the_overdue_openers(fake, pg_url, schema):
    fake.brain = opener_brain
    env = cli_env(fake, pg_url, schema)
    await companion(env, "chat", "--user", "bo", stdin="remember that I run on Sundays\n")
    due = due_time(await companion(env, "openers", "list"), "bo")
    late = due + timedelta(days=2)  # the bot was down when it fell due
    report = await companion(env, "tick", "--now", late.isoformat(), "--apply")
    assert report.startswith(f"{late:%Y-%m-%d %H:%M}Z: 0 openers")
    assert "1 long-overdue openers re-spread between" in report and "instead of sent" in report
    moved = due_time(await companion(env, "openers", "list"), "bo")
    assert moved > late  # still scheduled, later: not lost, not sent in a burst


async def test_tick_delivers_openers_on_slack(fake, pg_url, schema, sessions):
    fake.brain = opener_brain
    async with FakeSlack() as api:
        env = cli_env(fake, pg_url, schema, SLACK_BOT_TOKEN="xoxb-test", SLACK_API_URL=api.base_url)
        await companion(
            env,
            "chat",
            "--tenant",
            "slack:T0001",
            "--user",
            "U1",
            stdin="remember that my exam is on Monday\n",
        )
        at = (await exact_due(sessions, "U1")).isoformat()
        report = await companion(env, "tick", "--now", at, "--apply")
        assert "1 sent" in report
        posts = api.called("chat.postMessage")
        assert [(p["channel"], p["text"]) for p in posts] == [
            ("DU1", "Thinking of you! (my exam is on Monday)")
        ]


async def test_tick_now_is_a_dry_run_unless_apply(fake, pg_url, schema):
    """ "What would happen then" changes nothing: no model call, the schedule as it was."""
    fake.brain = opener_brain
    env = cli_env(fake, pg_url, schema)
    await companion(env, "chat", "--user", "cy", stdin="remember that I sing in a choir\n")
    await companion(env, "chat", "--user", "di", stdin="remember that I fly kites\n")
    before = await companion(env, "openers", "list")
    times = {user: due_time(before, user) for user in ("cy", "di")}
    due = max(times.values())
    now = (due + timedelta(minutes=1)).isoformat()
    # Each opener is due up to 6 hours of jitter after its member wrote: one more than
    # 30 minutes before the other is long overdue by then, and moved rather than run.
    on_time = [user for user, at in times.items() if due - at <= timedelta(minutes=29)]
    calls = len(fake.requests)

    preview = await companion(env, "tick", "--now", now)
    assert sorted(f"would run opener for {user}@local" for user in on_time) == sorted(
        line for line in preview.splitlines() if line.startswith("would run")
    )
    last_line = preview.strip().splitlines()[-1]
    assert "dry run, nothing changed; --apply runs it" in last_line
    assert f"{len(on_time)} openers due" in last_line
    if len(on_time) == 1:
        assert "1 long-overdue openers would be re-spread" in last_line
    assert await companion(env, "openers", "list") == before, "a dry run moved the schedule"
    assert len(fake.requests) == calls, "a dry run called the model"
    assert await companion(env, "tick", "--now", now) == preview, "and it can be asked again"
    late = (due + timedelta(days=3)).isoformat()
    assert "2 long-overdue openers would be re-spread" in await companion(
        env, "tick", "--now", late
    )
    assert await companion(env, "openers", "list") == before

    applied = await companion(env, "tick", "--now", now, "--apply")
    n = len(on_time)
    assert f"{n} openers (0 sent, 0 silent, {n} waiting for the member)" in applied
    assert await companion(env, "openers", "list") != before, "--apply runs the pass for good"


async def test_tick_help_says_now_is_a_dry_run(fake, pg_url):
    run = await run_cli(cli_env(fake, pg_url), "tick", "--help")
    assert run.code == 0
    words = " ".join(run.out.split())
    assert "dry run" in words and "--apply" in words
    refused = await run_cli(cli_env(fake, pg_url), "tick", "--apply")
    assert refused.code == 2 and "--apply goes with --now" in refused.err


async def test_tick_sends_a_reply_that_waited_before_the_opener(
    fake, pg_url, schema, engine, sessions
):
    """A member's answer whose handler died before sending it still waits when `companion
    tick` sends them an opener: the answer goes first, back in its thread, then the opener,
    so the member reads them in the order they were written (as under `companion run`)."""
    fake.brain = opener_brain
    scope = await engine.agent("slack:T0001", "U1")
    fact = InboundEvent(EventKind.USER_MESSAGE, "remember that my exam is on Monday", "k1")
    await engine.converse(scope, fact)  # answered and shown
    where = {"team": "T0001", "channel": "C5", "thread_ts": "1700000009.000300"}
    asked = InboundEvent(EventKind.USER_MESSAGE, "are you there?", "k2", where)
    await engine.submit(scope, asked)
    await engine.drain(scope)  # its turn ran; its handler died before sending the answer
    async with FakeSlack() as api:
        env = cli_env(fake, pg_url, schema, SLACK_BOT_TOKEN="xoxb-test", SLACK_API_URL=api.base_url)
        at = (await exact_due(sessions, "U1")).isoformat()
        assert "1 sent" in await companion(env, "tick", "--now", at, "--apply")
        posts = api.called("chat.postMessage")
        assert [(p["channel"], p.get("thread_ts"), p["text"]) for p in posts] == [
            ("C5", "1700000009.000300", "You said: are you there?"),
            ("DU1", None, "Thinking of you! (my exam is on Monday)"),
        ]


async def test_tick_now_with_an_offset_is_said_in_utc(fake, pg_url, schema):
    """`--now` with an offset is that moment, and the line says it in UTC, as its `Z` says:
    midnight at +05:00 is 19:00Z the day before, not midnight UTC."""
    env = cli_env(fake, pg_url, schema)
    preview = await companion(env, "tick", "--now", "2026-01-01T00:00+05:00")
    assert preview.strip().splitlines()[-1].startswith("2025-12-31 19:00Z (dry run")
