"""What an operator sees: JSON logs with event ids and no secrets or member words at INFO,
Prometheus metrics, /healthz and /readyz, and `companion doctor`."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import random
from collections.abc import Iterator
from urllib.parse import urlencode

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import async_sessionmaker

from adapters.common import Services
from adapters.slack.signatures import watch_signatures
from bot.database import make_engine
from bot.doctor import run_doctor
from bot.health import Health, add_health_routes
from bot.observability import PrometheusMetrics, log_handler, log_options
from core.config import EngineConfig
from core.errors import ConfigError
from core.events import EventKind, InboundEvent
from tests.conftest import cli_env, run_cli, served_url
from tests.fake_discord import FakeDiscord, user
from tests.fake_openai import is_summary_request, last_user_text, say, summary_of
from tests.fake_slack import TEAM, FakeSlack, signed
from tests.fake_slack import settle as settle_slack
from tests.rigs import SLACK_SECRET, slack_message, slack_rig
from tests.test_run import free_port

log = logging.getLogger(__name__)
SMALL = EngineConfig(context_window=4096, persona_limit=1000, human_limit=1000, rate_limit=None)
SECRET_WORDS = "my zucchini is called Esmeralda"


def msg(words: str) -> InboundEvent:
    return InboundEvent(EventKind.USER_MESSAGE, words)


def chatty(body):
    if is_summary_request(body):
        return summary_of(body)
    return say(f"ok: {last_user_text(body)[:40]}")


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """Every log record of the process, as `companion run` writes them (JSON lines)."""
    stream, root = io.StringIO(), logging.getLogger()
    handler, level = log_handler(stream, json=True), root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield stream
    root.removeHandler(handler)
    root.setLevel(level)


def lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def samples(exposition: bytes) -> dict[tuple[str, frozenset], float]:
    found = {}
    for family in text_string_to_metric_families(exposition.decode()):
        for sample in family.samples:
            found[sample.name, frozenset(sample.labels.items())] = sample.value
    return found


def value(found: dict, name: str, **labels: str) -> float | None:
    return found.get((name, frozenset(labels.items())))


# --- logs ------------------------------------------------------------------------------------


async def test_json_logs_carry_the_event_ids_and_never_the_members_words(
    make_engine_for, fake, captured
):
    engine = make_engine_for(retries=0)
    scope = await engine.agent("t", "ann")
    ok = await engine.converse(scope, msg(SECRET_WORDS))
    fake.fail_next(500)
    failed = await engine.converse(scope, msg(SECRET_WORDS + " again"))

    records = lines(captured)
    assert {"time", "level", "logger", "message"} <= set(records[0])
    for event_id in (ok.event_id, failed.event_id):
        during = [r for r in records if r.get("event_id") == event_id]
        assert during, f"no log line carries event {event_id}"
        assert all(
            (r["tenant_id"], r["agent_id"]) == (scope.tenant_id, scope.agent_id) for r in during
        )
    (warning,) = [
        r for r in records if r["level"] == "WARNING" and r["logger"] == "core.runtime.engine"
    ]
    assert warning["event_id"] == failed.event_id and "HTTP 500" in warning["message"]
    loud = [r for r in records if r["level"] != "DEBUG"]
    assert not [r for r in loud if "zucchini" in json.dumps(r) or "Esmeralda" in json.dumps(r)]


def test_secrets_are_masked_in_messages_arguments_and_tracebacks(captured):
    secrets = [
        "sk-proj-4f9Qm2XcV7bN1aLk",
        "xoxb-1234567890-0987654321-AbCdEfGhIjKl",
        "xapp-1-A0123-456789-abcdef0123",
        "MTIzNDU2Nzg5MDEyMzQ1Njc4OQ.GhIjKl.aBcDeFgHiJkLmNoPqRsTuVwXyZ012345",
        "s3cr3t-pa55",
    ]
    log = logging.getLogger("companion.test")
    log.warning("key %s in %s", secrets[0], {"token": secrets[1]})
    log.info(f"Authorization: Bearer {secrets[4]}xyz app={secrets[2]}")
    log.error("db postgresql://companion:%s@db:5432/companion", secrets[4])
    try:
        raise RuntimeError(f"login with {secrets[3]} failed")
    except RuntimeError:
        log.exception("discord")

    out = captured.getvalue()
    assert not [s for s in secrets if s in out]
    assert out.count("***") >= 5 and "xoxb-***" in out and "Bearer ***" in out
    assert "RuntimeError: login with *** failed" in lines(captured)[-1]["exc"]


# --- metrics ---------------------------------------------------------------------------------


async def test_metrics_count_events_model_calls_tokens_flushes_and_errors(
    make_engine_for, fake, sessions
):
    fake.brain = chatty
    engine = make_engine_for(SMALL, retries=0)
    metrics = engine.mind.metrics = PrometheusMetrics(sessions)
    scope = await engine.agent("t", "ann")
    rng, conversations, flushes = random.Random(4), 0, 0
    while not flushes:
        words = " ".join(rng.choice(["river", "maple", "quartz", "ember"]) for _ in range(120))
        exchange = await engine.converse(scope, msg(words))
        conversations, flushes = conversations + 1, exchange.result.flushes
        assert conversations < 100, "no flush happened"
    fake.fail_next(400)  # refused as set up: the turn fails
    await engine.converse(scope, msg("are you there?"))
    fake.fail_next(503)  # the endpoint is down: the message waits for it
    await engine.converse(scope, msg("hello?"))

    found = samples(await metrics.exposition())
    done = value(found, "companion_events_total", kind="user_message", status="done")
    assert done == conversations
    assert value(found, "companion_events_total", kind="user_message", status="failed") == 1
    assert value(found, "companion_events_total", kind="user_message", status="deferred") == 1
    assert value(found, "companion_errors_total", kind="model") == 1
    assert value(found, "companion_flushes_total") == 1
    assert value(found, "companion_warnings_total") >= 1
    model_calls = len(fake.requests) - 2  # summary calls included; the last two failed
    assert value(found, "companion_model_seconds_count") == model_calls
    assert value(found, "companion_model_seconds_sum") > 0
    assert value(found, "companion_completion_tokens_total") == 10 * model_calls
    assert value(found, "companion_prompt_tokens_total") > 1000 * conversations
    assert value(found, "companion_turn_seconds_count") == conversations + 1


async def test_queue_depth_is_measured_in_postgres_when_scraped(engine, sessions):
    metrics = PrometheusMetrics(sessions)
    scope = await engine.agent("t", "ann")

    await engine.submit(scope, msg("hello"))
    found = samples(await metrics.exposition())
    assert value(found, "companion_queue_depth", queue="events") == 1
    assert value(found, "companion_queue_depth", queue="outbox") == 0

    (result,) = await engine.drain(scope)
    found = samples(await metrics.exposition())
    assert value(found, "companion_queue_depth", queue="events") == 0
    assert value(found, "companion_queue_depth", queue="outbox") == 1  # not yet sent

    await engine.outbox.take_replies(result.event_id)
    found = samples(await metrics.exposition())
    assert value(found, "companion_queue_depth", queue="outbox") == 0


# --- health ----------------------------------------------------------------------------------


async def get(health: Health, path: str) -> tuple[int, str]:
    async with TestClient(TestServer(add_health_routes(aiohttp.web.Application(), health))) as c:
        response = await c.get(path)
        return response.status, await response.text()


async def test_healthz_and_readyz_follow_the_database_and_the_platforms(sessions):
    health = Health(sessions, PrometheusMetrics(sessions), started=True)
    health.report("Slack", "connected", "connected as @companion")
    assert (await get(health, "/healthz"))[0] == 200
    status, body = await get(health, "/readyz")
    assert status == 200 and json.loads(body)["platforms"]["Slack"]["state"] == "connected"

    health.report("Discord", "retrying", "cannot reach Discord (OSError)")
    status, body = await get(health, "/readyz")
    assert status == 503 and json.loads(body)["reason"] == (
        "Discord retrying: cannot reach Discord (OSError)"
    )
    health.report("Discord", "refused", "DISCORD_TOKEN was refused")
    assert "Discord refused" in json.loads((await get(health, "/readyz"))[1])["reason"]
    health.report("Discord", "connected", "connected as Companion#1")

    health.started = False
    status, body = await get(health, "/readyz")
    assert status == 503 and json.loads(body)["reason"] == "starting or stopping"

    closed = make_engine(f"postgresql://companion:pw@127.0.0.1:{free_port()}/companion")
    try:
        down = Health(async_sessionmaker(closed), PrometheusMetrics(async_sessionmaker(closed)))
        down.started = True
        assert (await get(down, "/healthz"))[0] == 200
        status, body = await get(down, "/readyz")
        assert status == 503 and "database" in json.loads(body)["reason"]
        assert "pw" not in body
        status, body = await get(down, "/metrics")  # the rest still reported
        assert status == 200 and "companion_events_total" in body
        assert "companion_queue_depth{" not in body
    finally:
        await closed.dispose()


# --- companion doctor ------------------------------------------------------------------------


async def doctor(env: dict) -> tuple[int, list[str], str]:
    run = await run_cli(env, "doctor")
    return run.code, run.out.splitlines(), run.err


class Approved(FakeDiscord):
    """A Discord application with both privileged intents turned on."""

    def _application(self):
        return {**super()._application(), "flags": (1 << 15) | (1 << 19)}


BOT = user(1_200_000_000_000_000_001, "Companion", bot=True)


async def test_doctor_passes_against_working_services(fake, pg_url, schema):
    async with FakeSlack() as slack, Approved(BOT, 1_200_000_000_000_000_002) as discord:
        env = cli_env(
            fake,
            pg_url,
            schema,
            COMPANION_EMBEDDING_MODEL="fake-embed",
            SLACK_BOT_TOKEN="xoxb-test",
            SLACK_SIGNING_SECRET="secret",
            SLACK_API_URL=slack.base_url,
            DISCORD_TOKEN="discord-token",
            DISCORD_API_URL=discord.api_url,
        )
        status, out, err = await doctor(env)
    assert status == 0, out
    *checks, last = out
    assert all(line.startswith("ok  ") for line in checks), out
    assert last == f"doctor: {len(checks)} ok, 0 warnings, 0 failures: ready"
    for check in (
        "settings",
        "database: PostgreSQL",
        "database migrations",
        "pgvector",
        "model",
        "functions: fake calls functions",
        "embedding model",
    ):
        assert any(line.startswith(f"ok   {check}") for line in out), (check, out)
    assert any("Slack: signed in" in line for line in out)
    assert any("Discord: signed in as companion" in line for line in out)
    assert slack.called("auth.test") and fake.requests[0]["max_tokens"] == 1

    assert "Traceback" not in err
    assert "voice" not in err, "Companion never joins a voice channel: no warning about it"


async def test_doctor_says_what_is_wrong_without_a_traceback(fake, pg_url, schema):
    async with FakeSlack() as slack, FakeDiscord(BOT, 1_200_000_000_000_000_002) as discord:
        slack.fail_methods["auth.test"] = "invalid_auth"
        env = cli_env(
            fake,
            pg_url,
            schema,
            OPENAI_BASE_URL=f"http://127.0.0.1:{free_port()}/v1",
            SLACK_BOT_TOKEN="xoxb-revoked",
            SLACK_APP_TOKEN="xoxb-not-an-app-token",
            SLACK_API_URL=slack.base_url,
            DISCORD_TOKEN="discord-token",
            DISCORD_API_URL=discord.api_url,
        )
        status, out, err = await doctor(env)
    assert status == 1
    failures = [line for line in out if line.startswith("FAIL ")]
    assert any("model" in f and "cannot connect" in f and "OPENAI_BASE_URL" in f for f in failures)
    assert any("SLACK_BOT_TOKEN was refused (invalid_auth)" in f for f in failures)
    assert any("SLACK_APP_TOKEN must start with xapp-" in f for f in failures)
    assert any("Message Content Intent" in f for f in failures)
    assert any(line.startswith("ok   database") for line in out)
    assert "Traceback" not in err and "Traceback" not in "\n".join(out)
    assert "xoxb-revoked" not in "\n".join(out)


async def test_doctor_on_a_database_that_is_down_or_not_migrated(fake, pg_url):
    down = cli_env(fake, f"postgresql://companion:pw@127.0.0.1:{free_port()}/companion")
    out = io.StringIO()
    assert await run_doctor(down, out) == 1
    (database,) = [line for line in out.getvalue().splitlines() if "database" in line]
    assert database.startswith("FAIL database: cannot use 127.0.0.1:")
    assert "DATABASE_URL" in database and "pw" not in database

    engine = make_engine(pg_url)
    async with engine.begin() as connection:
        await connection.execute(text("DROP SCHEMA IF EXISTS doctor_empty CASCADE"))
        await connection.execute(text("CREATE SCHEMA doctor_empty"))
    await engine.dispose()
    out = io.StringIO()  # a chat-only setup on a fresh database: nothing to fix
    assert await run_doctor(cli_env(fake, pg_url, "doctor_empty"), out) == 0, out.getvalue()
    lines = out.getvalue().splitlines()
    assert "ok   database migrations: a fresh database; the first companion command" in "\n".join(
        lines
    )
    assert any(
        line.startswith("ok   platforms: none configured: `companion chat` works") for line in lines
    )

    engine = make_engine(pg_url)  # a database migrated by a newer Companion
    async with engine.begin() as connection:
        await connection.execute(
            text("CREATE TABLE doctor_empty.alembic_version (version_num varchar(32) PRIMARY KEY)")
        )
        await connection.execute(text("INSERT INTO doctor_empty.alembic_version VALUES ('9999')"))
    await engine.dispose()
    out = io.StringIO()
    assert await run_doctor(cli_env(fake, pg_url, "doctor_empty"), out) == 1
    assert "FAIL database migrations: the database is at 9999, a revision this version" in (
        out.getvalue()
    ), out.getvalue()

    out = io.StringIO()
    assert await run_doctor({"COMPANION_RATE_LIMIT": "lots"}, out) == 1
    assert out.getvalue().startswith("FAIL settings: COMPANION_RATE_LIMIT must look like")


async def test_doctor_on_a_fresh_database_passes_and_ends_with_a_true_summary(fake, pg_url):
    """The normal first state, a database where pgvector is not created yet (the first
    command creates it), is no failure; the last line counts what the lines above say."""
    engine = make_engine(pg_url)
    async with engine.connect() as connection:
        await connection.execution_options(isolation_level="AUTOCOMMIT")
        await connection.execute(text("DROP DATABASE IF EXISTS doctor_fresh"))
        await connection.execute(text("CREATE DATABASE doctor_fresh"))
    await engine.dispose()
    fresh = make_url(pg_url).set(database="doctor_fresh").render_as_string(hide_password=False)
    status, out, err = await doctor(cli_env(fake, fresh))
    vector = next(line for line in out if "pgvector" in line)
    assert vector.startswith("ok   pgvector: available; the first companion command creates it")
    assert status == 0, out
    *checks, last = out
    levels = [line.split()[0] for line in checks]
    assert levels.count("FAIL") == 0 and levels.count("ok") > 5 and "Traceback" not in err
    warned = levels.count("warn")
    assert last.startswith(
        f"doctor: {levels.count('ok')} ok, {warned} warning{'s' * (warned != 1)}, 0 failures: "
    ), out

    status, out, _ = await doctor({"COMPANION_RATE_LIMIT": "lots"})
    assert status == 1
    assert out[-1] == "doctor: 0 ok, 0 warnings, 1 failure: fix the FAIL lines above"


# --- companion run ---------------------------------------------------------------------------


def test_log_options_json_for_run_text_for_people():
    assert log_options({}, "run") == (logging.INFO, True)  # a server says what connected
    assert log_options({}, "chat") == (logging.WARNING, False)
    assert log_options({"COMPANION_LOG_FORMAT": "text", "COMPANION_LOG_LEVEL": "info"}, "run") == (
        logging.INFO,
        False,
    )
    with pytest.raises(ConfigError, match="COMPANION_LOG_FORMAT must be json or text"):
        log_options({"COMPANION_LOG_FORMAT": "xml"}, "run")
    with pytest.raises(ConfigError, match="COMPANION_LOG_LEVEL"):
        log_options({"COMPANION_LOG_LEVEL": "loud"}, "run")


def test_library_noise_about_deliberate_choices_is_dropped():
    stream = io.StringIO()
    handler = log_handler(stream, json=False)
    logger = logging.getLogger("slack_bolt.AsyncApp")
    logger.addHandler(handler)
    try:
        logger.warning("As you gave `client` as well, `token` will be unused.")
        logger.warning("Failed to run listener function (error: boom)")
    finally:
        logger.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and "Failed to run listener function" in lines[0]


async def test_no_member_words_at_info_from_libraries_bad_signatures_bad_json_or_errors(
    engine, members, sessions, clock, fake
):
    """Issue 27, finding 10: slack_bolt logs a request with a bad signature, body and all, at
    INFO; a wrong or rotated SLACK_SIGNING_SECRET wrote every member's DM to the log."""
    stream, root = io.StringIO(), logging.getLogger()
    handler, level = log_handler(stream, json=True), root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)  # what `companion run` logs by default
    services = Services(engine, members, frozenset())
    try:
        async with slack_rig(services, users=("U1",)) as rig:
            server = TestServer(rig.app.web_app(path="/slack/events"))
            async with TestClient(server) as http:
                body = json.dumps(slack_message(text=SECRET_WORDS))
                bad = signed(body, "a rotated secret")
                async with http.post("/slack/events", data=body, headers=bad) as answer:
                    assert answer.status == 401
                broken = body[:-20]  # JSON cut short, correctly signed
                async with http.post(
                    "/slack/events", data=broken, headers=signed(broken, SLACK_SECRET)
                ) as answer:
                    assert answer.status == 500  # Bolt's own answer; Slack never sends it
                unknown = urlencode(
                    {
                        "payload": json.dumps(
                            {
                                "type": "block_actions",
                                "team": {"id": TEAM},
                                "user": {"id": "U1"},
                                "actions": [{"action_id": "nobody", "value": SECRET_WORDS}],
                            }
                        )
                    }
                )
                headers = signed(unknown, SLACK_SECRET)
                headers["content-type"] = "application/x-www-form-urlencoded"
                async with http.post("/slack/events", data=unknown, headers=headers) as answer:
                    assert answer.status == 404  # no listener for it
                rig.api.fail_methods["chat.postMessage"] = "fatal_error"  # a library error
                body = json.dumps(slack_message(text=SECRET_WORDS + " again"))
                async with http.post(
                    "/slack/events", data=body, headers=signed(body, SLACK_SECRET)
                ) as answer:
                    assert answer.status == 200
                await settle_slack()
        log.info("inspector search ?q=%s", "zucchini")  # our own code is trusted, and tested
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    records = lines(stream)
    said = [r["message"] for r in records if r["logger"].startswith("slack_bolt")]
    assert any("[withheld]" in m for m in said), said  # what Bolt warns of, without the body
    loud = [json.dumps(r) for r in records if r["logger"] != __name__]
    assert loud and not [r for r in loud if "zucchini" in r or "Esmeralda" in r], loud


async def test_a_wrong_signing_secret_is_warned_of_now_and_then_without_the_body(engine, members):
    """Issue 27, finding 10, after its fix: Bolt's INFO line for a bad signature is below the
    log level, so an operator with a wrong or rotated SLACK_SIGNING_SECRET saw nothing while
    every event was refused. One WARNING names the fix, then one per ten minutes at most,
    counting the refused requests meanwhile; no body, no member's words."""
    stream, root = io.StringIO(), logging.getLogger()
    handler, level = log_handler(stream, json=True), root.level
    bolt, bolt_level = logging.getLogger("slack_bolt"), logging.getLogger("slack_bolt").level
    root.addHandler(handler)
    root.setLevel(logging.INFO)  # what `companion run` logs by default
    bolt.setLevel(logging.WARNING)  # as configure_logging quiets it
    now = [1000.0]
    services = Services(engine, members, frozenset())
    try:
        async with slack_rig(services, users=("U1",)) as rig:
            web_app = rig.app.web_app(path="/slack/events")
            watched = watch_signatures(web_app, "/slack/events", clock=lambda: now[0])
            async with TestClient(TestServer(watched)) as http:

                async def post(secret: str) -> int:
                    body = json.dumps(slack_message(text=SECRET_WORDS))
                    headers = signed(body, secret)
                    async with http.post("/slack/events", data=body, headers=headers) as answer:
                        return answer.status

                statuses = [await post("a rotated secret") for _ in range(3)]
                assert await post(SLACK_SECRET) == 200  # a good one is no refusal
                now[0] += 599
                statuses.append(await post("a rotated secret"))
                now[0] += 2  # ten minutes after the first warning
                statuses.append(await post("a rotated secret"))
                await settle_slack()
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        bolt.setLevel(bolt_level)
    assert statuses == [401] * 5
    warned = [r for r in lines(stream) if r["logger"] == "adapters.slack.signatures"]
    assert [r["level"] for r in warned] == ["WARNING", "WARNING"], warned
    assert "Slack requests refused: 1 " in warned[0]["message"]
    assert "Slack requests refused: 4 " in warned[1]["message"]  # 2, 3, the 599 s one, this
    assert all("check SLACK_SIGNING_SECRET" in r["message"] for r in warned)
    assert "zucchini" not in stream.getvalue() and "Esmeralda" not in stream.getvalue()


async def test_bytes_that_are_not_text_on_slacks_path_are_a_400_not_an_error(
    engine, members, captured
):
    """Anyone can post to /slack/events: a body that is not UTF-8 (or names a charset no
    one has) is refused as not Slack's, with no traceback in the log and nothing stored."""
    services = Services(engine, members, frozenset())
    async with slack_rig(services, users=("U1",)) as rig:
        watched = watch_signatures(rig.app.web_app(path="/slack/events"), "/slack/events")
        async with TestClient(TestServer(watched)) as http:
            statuses = []
            for body, kind in (
                (b"\xff\xfe{}", "application/json"),
                (b"token=x\xff", "application/x-www-form-urlencoded"),
                (b"{}", "application/json; charset=no-such-charset"),
            ):
                headers = {**signed(body.decode("latin-1"), SLACK_SECRET), "Content-Type": kind}
                async with http.post("/slack/events", data=body, headers=headers) as answer:
                    statuses.append(answer.status)
    assert statuses == [400, 400, 400]
    assert [r for r in lines(captured) if r["level"] in ("ERROR", "CRITICAL")] == []


async def test_a_failed_statement_never_carries_its_parameters_into_the_log(
    pg_url, schema, captured
):
    engine = make_engine(served_url(pg_url, schema))
    try:
        async with engine.connect() as conn:
            for sql in (
                "SELECT CAST(:words AS integer)",
                "SELECT CAST(CAST(:words AS text) AS int)",
            ):
                with pytest.raises(DBAPIError) as failed:
                    await conn.execute(text(sql), {"words": SECRET_WORDS})
                await conn.rollback()
                assert "hidden" in str(failed.value)  # SQLAlchemy lists no parameter
                log.exception("a statement failed", exc_info=failed.value)
    finally:
        await engine.dispose()
    records = lines(captured)
    assert len(records) == 2 and all("invalid input" in r["exc"] for r in records)
    assert "zucchini" not in captured.getvalue()


async def test_a_slack_request_counts_as_received_from_its_arrival_and_its_answer_is_timed():
    """Slack's requests come first from the moment they arrive (bot.run.acknowledged_first):
    work after earlier acknowledgements waits until this one is answered, and the time to
    the answer goes to companion_acknowledgement_seconds."""
    from bot.run import acknowledged_first
    from core.runtime.activity import Activity

    activity, metrics = Activity(), PrometheusMetrics()
    ran, arrived, answer = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def after_ack() -> None:
        ran.set()

    async def slack(request: aiohttp.web.Request) -> aiohttp.web.Response:
        arrived.set()
        await answer.wait()
        return aiohttp.web.Response(text="")

    app = aiohttp.web.Application(middlewares=[acknowledged_first(activity, metrics)])
    app.router.add_post("/slack/events", slack)
    async with TestClient(TestServer(app)) as client:
        posted = asyncio.create_task(client.post("/slack/events", data="{}"))
        await asyncio.wait_for(arrived.wait(), 10)
        activity.start(after_ack(), "an earlier message's turn")
        for _ in range(100):  # until it is waiting for the request to be answered
            if activity.giving_way:
                break
            await asyncio.sleep(0.01)
        assert activity.giving_way == 1 and not ran.is_set()
        answer.set()
        assert (await posted).status == 200
        await asyncio.wait_for(ran.wait(), 10)
    found = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families((await metrics.exposition()).decode())
        for sample in family.samples
    }
    assert value(found, "companion_acknowledgement_seconds_count") == 1
