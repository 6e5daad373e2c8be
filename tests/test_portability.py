"""Export, reset and import: a member's memory leaves and comes back exactly as it was.

The first tests drive the `companion` command (in this process); the last ones call
`core.members.portability` directly, to cover what the fake's chats never make (passages,
summaries).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy import text as sql

from core.directory import ensure_agent
from core.errors import BadExport, ImportConflict
from core.events import EventKind, InboundEvent
from core.members.portability import export_agent, import_agent, parse_export
from core.memory.store import AgentStore
from core.models import Message, Passage, PassageVector
from core.runtime.engine import Exchange
from core.scope import enter_scope
from tests.conftest import Run, cli_env, run_cli
from tests.fake_openai import person_said

TENANT = "club"


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A private directory (not tmp_path: a concurrent pytest run may prune those)."""
    with tempfile.TemporaryDirectory(prefix="companion-scratch-") as name:
        yield Path(name)


async def chat(env: dict, user: str, *lines: str) -> str:
    run = await run_cli(
        env, "chat", "--tenant", TENANT, "--user", user, stdin="".join(f"{x}\n" for x in lines)
    )
    assert run.code == 0, run
    return run.out


async def export(env: dict, user: str) -> dict:
    run = await run_cli(env, "export", "--tenant", TENANT, "--user", user)
    assert run.code == 0, run
    return json.loads(run.out)


async def restore(env: dict, path: Path | str, *args: str) -> Run:
    return await run_cli(env, "import", str(path), *args)


def assert_one_line_error(run: Run) -> str:
    assert run.code == 2, run
    assert "Traceback" not in run.err, run.err
    line = run.err.strip()
    assert line and "\n" not in line, f"want one line on stderr, got: {run.err!r}"
    return line


def memory(doc: dict) -> dict:
    """What the contract promises an export carries, and an import restores."""
    return {
        "blocks": doc["blocks"],
        "messages": [(m["role"], m["content"], m["created_at"]) for m in doc["messages"]],
        "summary": doc["summary"],
        "passages": [(p["text"], p["created_at"]) for p in doc["passages"]],
    }


def human(doc: dict) -> str:
    return next(b["value"] for b in doc["blocks"] if b["label"] == "human")


async def test_reset_erases_one_member_only(fake, pg_url, schema):
    env = cli_env(fake, pg_url, schema)
    await asyncio.gather(
        chat(env, "alice", "hello", "remember that my cat is called Miso"),
        chat(env, "bob", "hi, I am Bob", "remember that I play chess"),
    )
    bob_before = await export(env, "bob")
    assert len(bob_before["messages"]) > 0

    run = await run_cli(env, "reset", "--tenant", TENANT, "--user", "alice", "--yes")
    assert run.code == 0, run

    alice, bob_after = await asyncio.gather(
        run_cli(env, "export", "--tenant", TENANT, "--user", "alice"), export(env, "bob")
    )
    assert bob_after == bob_before  # every message of the other member still there
    # The member is still known, with a fresh agent: nothing remembered.
    assert alice.code == 0, alice
    fresh = json.loads(alice.out)
    assert fresh["messages"] == [] and fresh["passages"] == [] and fresh["summary"] is None
    assert "Miso" not in json.dumps(fresh)


async def test_export_reset_import_round_trip(fake, pg_url, schema, scratch):
    env = cli_env(fake, pg_url, schema)
    await chat(
        env, "alice", "hello", "remember that my cat is called Miso", "what did I say about cats?"
    )
    first = await export(env, "alice")
    assert [m["content"] for m in first["messages"] if m["role"] == "user"] == [
        "hello",
        "remember that my cat is called Miso",
        "what did I say about cats?",
    ]
    assert "my cat is called Miso" in human(first)
    times = [datetime.fromisoformat(m["created_at"]) for m in first["messages"]]
    assert times == sorted(times) and all(t.tzinfo for t in times)
    path = scratch / "alice.json"
    path.write_text(json.dumps(first), encoding="utf-8")

    run = await run_cli(env, "reset", "--tenant", TENANT, "--user", "alice", "--yes")
    assert run.code == 0, run
    # No --replace: accepted only because the reset left alice with no memory at all.
    run = await restore(env, path, "--tenant", TENANT, "--user", "alice")
    assert run.code == 0, run

    again = await export(env, "alice")
    assert memory(again) == memory(first)
    assert again["messages"] == first["messages"]  # tool calls, queue membership: all of it


async def test_import_into_another_member_and_conflicts(fake, pg_url, schema, scratch):
    env = cli_env(fake, pg_url, schema)
    await asyncio.gather(
        chat(env, "alice", "remember that my cat is called Miso", "hello"),
        chat(env, "bob", "remember that I play chess"),
    )
    path = scratch / "a.json"
    run, bob = await asyncio.gather(
        run_cli(env, "export", "--tenant", TENANT, "--user", "alice", "--output", str(path)),
        export(env, "bob"),
    )
    assert run.code == 0, run
    alice = json.loads(path.read_text(encoding="utf-8"))

    into_dave, into_bob = await asyncio.gather(
        restore(env, path, "--tenant", TENANT, "--user", "dave"),
        restore(env, path, "--tenant", TENANT, "--user", "bob"),
    )
    # Into a member who has memory: refused without --replace.
    line = assert_one_line_error(into_bob)
    assert "--replace" in line, line
    assert f"bob@{TENANT} already has memory" in line and "agent " not in line, line
    # Into a member who had no agent: dave gets alice's memory, and his agent uses it.
    assert into_dave.code == 0, into_dave
    dave_says, bob_now = await asyncio.gather(
        chat(env, "dave", "what do you know about me?"), export(env, "bob")
    )
    assert dave_says == (
        "I know this: Nothing known yet about this person.\nmy cat is called Miso\n"
    )
    assert bob_now == bob
    # alice's memory, not her name: an admin's list does not show two "alice".
    assert alice["display_name"] == "alice"
    assert (await export(env, "dave"))["display_name"] != "alice"

    run = await restore(env, path, "--tenant", TENANT, "--user", "bob", "--replace")
    assert run.code == 0, run
    replaced = await export(env, "bob")
    assert memory(replaced) == memory(alice)
    assert "chess" not in json.dumps(replaced)
    assert (replaced["tenant"], replaced["user"]) == (TENANT, "bob")
    assert replaced["display_name"] == "bob"


async def test_damaged_export_changes_nothing(fake, pg_url, schema, scratch):
    env = cli_env(fake, pg_url, schema)
    await chat(env, "bob", "remember that I play chess", "hello", "bye")
    good = await export(env, "bob")

    cut = json.dumps(good)
    broken = dict(good, messages=[dict(m) for m in good["messages"]])
    broken["messages"][2]["created_at"] = "yesterday"  # damaged half-way through
    files = {
        "truncated": cut[: len(cut) // 2],
        "not-an-export": json.dumps({"hello": "world"}),
        "bad-message": json.dumps(broken),
    }
    for name, text in files.items():
        (scratch / f"{name}.json").write_text(text, encoding="utf-8")

    # --replace would erase bob first: a bad file must leave him exactly as he was.
    attempts = {
        name: restore(
            env, scratch / f"{name}.json", "--tenant", TENANT, "--user", "bob", "--replace"
        )
        for name in files
    }
    attempts["missing"] = restore(
        env, scratch / "missing.json", "--tenant", TENANT, "--user", "bob"
    )
    # A bad file for a member who has no agent yet creates nobody.
    attempts["new-member"] = restore(
        env, scratch / "bad-message.json", "--tenant", TENANT, "--user", "erin"
    )
    runs = dict(zip(attempts, await asyncio.gather(*attempts.values()), strict=True))
    errors = {name: assert_one_line_error(run) for name, run in runs.items()}
    assert "not valid JSON" in errors["truncated"], errors
    assert "not a Companion export" in errors["not-an-export"], errors
    assert "messages[2]" in errors["bad-message"], errors
    assert "missing.json" in errors["missing"], errors

    bob, erin = await asyncio.gather(
        export(env, "bob"), run_cli(env, "export", "--tenant", TENANT, "--user", "erin")
    )
    assert bob == good
    assert erin.code == 2 and "erin" in erin.err, erin


# --- core.members.portability, called directly ---------------------------------------------


T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


async def test_functions_round_trip_passages_summary_and_timestamps(
    make_engine_for, sessions, clock, fake
):
    engine = make_engine_for(embeddings=True)
    scope = await engine.agent("club", "alice", display_name="Alice")
    for i, text in enumerate(["hello", "remember that my cat is called Miso", "bye"]):
        clock.now = T0 + timedelta(minutes=5 * i)
        await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, text))
    async with sessions() as session, session.begin():
        store = AgentStore(session, scope, engine.mind.config.max_message_tokens)
        await store.add_passage("Miso is a grey tabby", T0 - timedelta(days=30), "note", None)
        await store.add_passage("Alice's sister lives in Lyon", T0 - timedelta(days=2))
        first_turn = (await store.in_context())[:3]  # "hello", the call, its result
        assert [m.role for m in first_turn] == ["user", "assistant", "tool"]
        await store.evict(first_turn)
        await store.add_summary("Alice said hello.", 3, 20, T0 + timedelta(minutes=1))
    async with sessions() as session:
        doc = await export_agent(session, scope)

    assert doc["summary"] == "Alice said hello."
    assert [p["text"] for p in doc["passages"]] == [
        "Miso is a grey tabby",
        "Alice's sister lives in Lyon",
    ]
    assert doc["passages"][0]["created_at"] == (T0 - timedelta(days=30)).isoformat()
    times = [datetime.fromisoformat(m["created_at"]) for m in doc["messages"]]
    assert {t - T0 for t in times} == {timedelta(minutes=m) for m in (0, 5, 10)}
    assert times == sorted(times)
    assert [m["in_context"] for m in doc["messages"]][:4] == [False, False, False, True]

    # Through JSON, as a file would carry it, into another member; imported much later.
    doc = json.loads(json.dumps(doc))
    later = T0 + timedelta(days=100)
    embedded_before = len(fake.embedding_requests)
    async with sessions() as session, session.begin():
        other = await ensure_agent(session, "club", "zoe", engine.mind.config)
        counts = await import_agent(
            session, other, parse_export(doc), engine.mind.config, later, engine.mind.embedder
        )
    assert counts == {"blocks": 2, "messages": len(doc["messages"]), "passages": 2}
    assert len(fake.embedding_requests) > embedded_before  # passages embedded on the way in
    async with sessions() as session:
        back = await export_agent(session, other)
        vectors = await session.scalar(
            select(func.count()).where(
                PassageVector.agent_id == other.agent_id, PassageVector.embedding.is_not(None)
            )
        )

    assert memory(back) == memory(doc)
    assert back["messages"] == doc["messages"]
    assert back["summaries"] == doc["summaries"]
    assert back["passages"] == doc["passages"]  # with their sources
    assert (back["tenant"], back["user"]) == ("club", "zoe")
    assert vectors == 2
    # The original is untouched by an import elsewhere.
    async with sessions() as session:
        assert memory(await export_agent(session, scope)) == memory(doc)

    # The agent goes on from the restored memory: same facts, same queue, same summary.
    reply = await engine.converse(
        other, InboundEvent(EventKind.USER_MESSAGE, "what do you know about me?")
    )
    assert reply.replies == [
        "I know this: Nothing known yet about this person.\nmy cat is called Miso"
    ]
    prompt = fake.chat_requests[-1]["messages"]
    assert "Alice said hello." in prompt[1]["content"]
    assert person_said(fake.chat_requests[-1]) == [
        "remember that my cat is called Miso",  # "hello" was evicted before the export
        "bye",
        "what do you know about me?",
    ]


async def test_import_minimal_document_and_refusals(engine, sessions):
    """The documented keys only (no `summaries`): a hand-made or older export."""
    doc = {
        "format": "companion-export",
        "version": 1,
        "blocks": [
            {"label": "persona", "value": "I am a test persona.", "limit": 500},
            {"label": "human", "value": "Name: Zoe. Likes kites.", "limit": 500},
        ],
        "messages": [
            {"role": "user", "content": "I fly kites", "created_at": "2025-06-01T09:30:00+00:00"},
            {"role": "assistant", "content": "Kites!", "created_at": "2025-06-01T09:30:05+00:00"},
        ],
        "summary": "Zoe and I talked about kites.",
        "passages": [{"text": "Zoe's best kite is red", "created_at": "2025-05-01T00:00:00+00:00"}],
    }
    now = datetime(2026, 1, 1, tzinfo=UTC)
    scope = await engine.agent("club", "zoe")
    async with sessions() as session, session.begin():
        await import_agent(session, scope, parse_export(doc), engine.mind.config, now)
    async with sessions() as session:
        back = await export_agent(session, scope)
    assert memory(back) == {
        "blocks": sorted(doc["blocks"], key=lambda b: b["label"]),
        "messages": [
            ("user", "I fly kites", "2025-06-01T09:30:00+00:00"),
            ("assistant", "Kites!", "2025-06-01T09:30:05+00:00"),
        ],
        "summary": "Zoe and I talked about kites.",
        "passages": [("Zoe's best kite is red", "2025-05-01T00:00:00+00:00")],
    }

    # Now zoe has memory: a second import is refused unless replacing, and changes nothing.
    other = dict(doc, messages=doc["messages"][:1], summary=None, passages=[])
    async with sessions() as session, session.begin():
        with pytest.raises(ImportConflict, match="--replace"):
            await import_agent(session, scope, parse_export(other), engine.mind.config, now)
    broken = dict(doc, messages=[doc["messages"][0], {"role": "wizard", "content": "x"}])
    with pytest.raises(BadExport, match=r"messages\[1\]\.role"):
        parse_export(broken)  # before anything is written
    async with sessions() as session:
        assert await export_agent(session, scope) == back
        assert (
            await session.scalar(select(func.count()).where(Message.agent_id == scope.agent_id))
            == 2
        )

    async with sessions() as session, session.begin():
        await import_agent(
            session, scope, parse_export(other), engine.mind.config, now, replace=True
        )
    async with sessions() as session:
        replaced = await export_agent(session, scope)
    assert memory(replaced)["messages"] == [("user", "I fly kites", "2025-06-01T09:30:00+00:00")]
    assert replaced["summary"] is None and replaced["passages"] == []


# --- parse_export: the whole document is checked before anything is written ----------------

AT = "2026-01-01T00:00:00+00:00"
MINIMAL = {
    "format": "companion-export",
    "version": 1,
    "blocks": [{"label": "human", "value": "likes tea"}],
    "messages": [{"role": "user", "content": "hi", "created_at": AT}],
    "passages": [],
}
DAMAGED = {
    "time-without-zone": (
        {"messages": [{"role": "user", "content": "hi", "created_at": "2026-01-01T00:00:00"}]},
        "messages[0].created_at: not an ISO-8601 time with a time zone: '2026-01-01T00:00:00'",
    ),
    "time-as-number": (
        {"passages": [{"text": "x", "created_at": 1767225600}]},
        "passages[0].created_at: not an ISO-8601 time with a time zone: 1767225600",
    ),
    "unknown-role": (
        {"messages": [{"role": "wizard", "content": "hi", "created_at": AT}]},
        "messages[0].role: input should be 'user', 'assistant', 'tool' or 'system'",
    ),
    "content-not-text": (
        {"messages": [{"role": "user", "content": 42, "created_at": AT}]},
        "messages[0].content: input should be a valid string",
    ),
    "tool-call-without-function": (
        {
            "messages": [
                {"role": "assistant", "tool_calls": [{"id": "c1"}], "created_at": AT},
            ]
        },
        "messages[0].tool_calls[0].function: field required",
    ),
    "limit-not-a-number": (
        {"blocks": [{"label": "human", "value": "x", "limit": "lots"}]},
        "blocks[0].limit: input should be a valid integer",
    ),
    "limit-too-big-for-the-table": (
        {"blocks": [{"label": "human", "value": "x", "limit": 10**12}]},
        "blocks[0].limit: input should be less than or equal to 2147483647",
    ),
    "two-blocks-one-label": (
        {"blocks": [{"label": "human", "value": "x"}, {"label": "human", "value": "y"}]},
        "blocks: two blocks are labelled human",
    ),
    "empty-passage": (
        {"passages": [{"text": "", "created_at": AT}]},
        "passages[0].text: string should have at least 1 character",
    ),
    "no-messages": ({"messages": None}, "messages: input should be a valid list"),
    "nul-in-display-name": (
        {"display_name": "Ann\x00"},
        "display_name: holds a NUL or a lone surrogate, which cannot be stored: 'Ann\\x00'",
    ),
    "lone-surrogate-in-display-name": (
        {"display_name": "Ann\ud800"},
        "display_name: holds a NUL or a lone surrogate, which cannot be stored: 'Ann\\ud800'",
    ),
    "nul-in-user": (
        {"user": "U\x001"},
        "user: holds a NUL or a lone surrogate, which cannot be stored: 'U\\x001'",
    ),
    "several-problems": (
        {"messages": [{"role": "x", "created_at": "y"}, {"role": "user"}]},
        "messages[0].role: input should be 'user', 'assistant', 'tool' or 'system' (and 2 more)",
    ),
}


@pytest.mark.parametrize("name", list(DAMAGED))
def test_a_damaged_export_is_refused_naming_the_place(name):
    changes, says = DAMAGED[name]
    with pytest.raises(BadExport) as error:
        parse_export({**MINIMAL, **changes})
    assert str(error.value) == f"the export is damaged: {says}"


async def test_import_names_a_display_name_postgres_cannot_store(fake, pg_url, schema, scratch):
    """Issue 27, finding 3: exit 1 'the database failed ... is it running' before."""
    env = cli_env(fake, pg_url, schema)
    for name, value in (("nul", "Ann\\u0000"), ("surrogate", "Ann\\ud800")):
        path = scratch / f"{name}.json"
        doc = json.dumps({**MINIMAL, "display_name": "PLACE"}).replace("PLACE", value)
        path.write_text(doc, encoding="utf-8")
        run = await restore(env, path, "--tenant", TENANT, "--user", "ann")
        error = assert_one_line_error(run)
        assert "display_name" in error and "database" not in error, error
    nobody = await run_cli(env, "export", "--tenant", TENANT, "--user", "ann")
    assert nobody.code == 2  # nothing was written: no member ann


def test_text_postgres_cannot_store_is_cleaned_and_old_exports_stay_searchable():
    export = parse_export(
        {
            **MINIMAL,
            "messages": [{"role": "user", "content": "a\x00b", "created_at": AT}],
            "summary": "said \x00 hi",
        }
    )
    (message,) = export.messages
    assert message.content == message.search_text == "a\ufffdb"  # no search_text key: derived
    assert message.created_at == datetime(2026, 1, 1, tzinfo=UTC)
    (summary,) = export.all_summaries(datetime(2026, 2, 1, tzinfo=UTC))
    # Messages without "in_context" are out of the queue: the summary covers them.
    assert summary.text == "said \ufffd hi" and summary.covers_messages == 1


async def _lock_waiters(sessions) -> int:
    async with sessions() as session:
        return int(
            await session.scalar(sql("SELECT count(*) FROM pg_locks WHERE NOT granted")) or 0
        )


async def test_a_replacing_import_answers_what_was_acknowledged_before_and_during_it(
    engine, members, sessions
):
    """Issue 8, finding 7: `import --replace` erased the member's pending events, so a message
    acknowledged before the import, or while it waited for the turn in progress, was never
    answered. Both are answered after it, from the imported memory."""
    scope = await engine.agent("club", "zoe")
    await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, "remember I play chess"))
    before = await engine.submit(
        scope, InboundEvent(EventKind.USER_MESSAGE, "what do you know about me?", "ev:1")
    )
    doc = dict(MINIMAL, blocks=[{"label": "human", "value": "Name: Zoe. Likes kites."}])
    async with sessions() as turn, turn.begin():  # a turn in progress holds the agent
        await enter_scope(turn, scope)
        await AgentStore(turn, scope, engine.mind.config.max_message_tokens).lock_agent()
        replacing = asyncio.create_task(
            members.admin_import("club", "ops", "zoe", parse_export(doc), replace=True)
        )
        for _ in range(200):  # the import waits for the turn
            if await _lock_waiters(sessions) or replacing.done():
                break
            await asyncio.sleep(0.05)
        assert not replacing.done()
        during = await engine.submit(
            scope, InboundEvent(EventKind.USER_MESSAGE, "what do you know about me now?", "ev:2")
        )
    await replacing

    for event_id in (before, during):
        replies = (await engine.answer(scope, event_id)).replies
        assert len(replies) == 1 and "Likes kites" in replies[0], replies
        assert "chess" not in replies[0]
    assert await engine.answer(scope, before) == Exchange(before, [], None)  # answered once


async def test_a_file_not_yet_answered_keeps_its_text_through_a_replacing_import(
    engine, members, sessions
):
    """The import replaces archival memory too, but not the text of a file whose event it
    keeps: answered after the import, the file is in memory as its answer says."""
    scope = await engine.agent("club", "zoe")
    answered, _ = await engine.store_file(scope, "old.txt", b"The kite is red.", "file:1")
    await engine.answer(scope, answered)
    waiting, _ = await engine.store_file(scope, "boat.txt", b"The boat needs sails.", "file:2")
    await members.admin_import("club", "ops", "zoe", parse_export(MINIMAL), replace=True)

    async with sessions() as session:
        sources = list(await session.scalars(select(Passage.source).order_by(Passage.id)))
    assert sources == ["boat.txt (part 1 of 1)"]  # the answered file went with the memory
    assert (await engine.answer(scope, waiting)).replies  # and this one is answered now
