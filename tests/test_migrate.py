"""Migrations: one transaction per revision, `companion migrate`, and what a start does with
a database that needs migrating (bot/database.py says the rule).

Each test makes a schema of its own at an older revision, as an existing deployment would
have it, with the revisions of migrations/versions (alembic, as `companion` runs it).
"""

from __future__ import annotations

import ast
import importlib.util
import itertools
import os

import pytest
from alembic import command
from sqlalchemy import text

from bot.database import make_engine
from bot.migrations import migrate, newest_revisions, pending, revisions
from core.errors import ConfigError, MigrationNeeded
from core.memory.prompt import message_tokens
from core.models import Message
from tests.conftest import ROOT, _empty_schema, cli_env, run_cli
from tests.test_message_vectors import _alembic

HEAD = "0030_indexes"
_names = itertools.count()


async def schema_at(pg_url: str, revision: str | None):
    """A new schema at `revision` (None: nothing yet); returns (engine, schema name)."""
    name = f"mig_{os.getpid()}_{next(_names)}"
    engine = make_engine(await _empty_schema(pg_url, name), schema=name)
    if revision:
        async with engine.connect() as connection:
            await connection.run_sync(_alembic, command.upgrade, revision)
            await connection.commit()
    return engine, name


async def revision_of(engine) -> set[str]:
    async with engine.connect() as connection:
        return set(await connection.scalars(text("SELECT version_num FROM alembic_version")))


def test_the_newest_revision_is_this_branch_s_and_the_rewriting_ones_are_marked():
    assert newest_revisions() == {HEAD}
    known = revisions()
    assert known[HEAD].parent == "0029" and not known[HEAD].rewrites_tables
    assert known["0027"].rewrites_tables and known["0017"].rewrites_tables
    assert not known["0029"].rewrites_tables and not known["0001"].rewrites_tables
    assert [r.name for r in pending({"0026"})] == ["0027", "0028", "0029", HEAD]
    assert pending({HEAD}) == []


async def test_a_failed_revision_keeps_the_revisions_before_it(pg_url):
    """0028 applies and stays; 0029 fails (a table of its name is in the way) and leaves
    nothing. In one transaction for all, the database was back at 0027."""
    engine, _ = await schema_at(pg_url, "0027")
    try:
        async with engine.begin() as connection:
            await connection.execute(text("CREATE TABLE spent_links (in_the_way int)"))
        with pytest.raises(ConfigError) as failed:
            await migrate(engine, 16)
        assert "spent_links" in str(failed.value)
        assert "(it stays at 0028, each revision before the failed one kept)" in str(failed.value)
        assert await revision_of(engine) == {"0028"}
        async with engine.begin() as connection:
            await connection.execute(text("DROP TABLE spent_links"))
        assert await migrate(engine, 16) == 16
        assert await revision_of(engine) == {HEAD}
    finally:
        await engine.dispose()


async def test_a_start_refuses_a_revision_that_rewrites_tables_and_applies_a_light_one(pg_url):
    engine, _ = await schema_at(pg_url, "0026")
    try:
        with pytest.raises(MigrationNeeded) as refused:
            await migrate(engine, 16, rewrite_tables=False)
        assert str(refused.value) == (
            "the database (at revision 0026) needs revision 0027 (Vectors are stored in half "
            "precision, in the row: `embedding halfvec(N)`, storage MAIN), which rewrites "
            "tables: run `companion migrate` once, then start again"
        )
        assert await revision_of(engine) == {"0026"}  # nothing applied

        async with engine.connect() as connection:  # an operator ran what rewrites tables
            await connection.run_sync(_alembic, command.upgrade, "0029")
            await connection.commit()
        said: list[str] = []
        assert await migrate(engine, 16, rewrite_tables=False, progress=said.append) == 16
        assert await revision_of(engine) == {HEAD}  # 0030 builds indexes concurrently
        assert said[0] == f"migrating the database from 0029 to {HEAD}: 1 revision"
        assert said[1].startswith(f"applied {HEAD} (Events found by their dedup key alone")
        assert len(said) == 2
    finally:
        await engine.dispose()


async def test_a_new_database_is_migrated_by_any_command(pg_url):
    engine, _ = await schema_at(pg_url, None)
    try:
        said: list[str] = []
        assert await migrate(engine, 16, rewrite_tables=False, progress=said.append) == 16
        assert await revision_of(engine) == {HEAD}
        assert said[0] == f"migrating the database from nothing (a new database) to {HEAD}: " + (
            f"{len(revisions())} revisions"
        )
        assert len(said) == 1 + len(revisions())  # one line per revision
    finally:
        await engine.dispose()


async def test_companion_migrate_says_each_revision_and_ends_with_one_line(pg_url, fake):
    engine, schema = await schema_at(pg_url, "0027")
    try:
        # `run` stops before any platform is entered (a token that would be refused)
        env = cli_env(fake, pg_url, schema, DISCORD_TOKEN="not-a-token")
        refused = await run_cli(env, "run")
        assert refused.code == 2
        assert refused.err.strip().splitlines() == [
            "companion: the database (at revision 0027) needs revision 0028 (Words in every "
            "language: the word index folds, splits and stems text of any script), which "
            "rewrites tables: run `companion migrate` once, then start again"
        ]
        assert await revision_of(engine) == {"0027"}
        doctor = await run_cli(env, "doctor")
        assert (
            f"warn database migrations: at 0027; revision 0028 rewrites tables: run "
            f"`companion migrate` once (to {HEAD}); until then no other command starts"
        ) in doctor.out.splitlines()

        done = await run_cli(env, "migrate")
        assert done.code == 0, done.err
        lines = done.out.splitlines()
        assert lines[0] == f"migrating the database from 0027 to {HEAD}: 3 revisions"
        assert [line.split(" (")[0] for line in lines[1:4]] == [
            "applied 0028",
            "applied 0029",
            f"applied {HEAD}",
        ]
        assert lines[4].startswith(f"migrated: the database is at {HEAD} (3 applied in ")
        assert len(lines) == 5

        again = await run_cli(env, "migrate")
        assert again.code == 0
        assert again.out.splitlines() == [
            f"the database is at {HEAD}, the newest revision: nothing to migrate"
        ]
        listed = await run_cli(env, "openers", "list")  # and the other commands start again
        assert listed.code == 0, listed.err
    finally:
        await engine.dispose()


async def test_companion_migrate_says_in_one_line_what_stopped_it(pg_url, fake):
    engine, schema = await schema_at(pg_url, "0028")
    try:
        async with engine.begin() as connection:
            await connection.execute(text("CREATE TABLE spent_links (in_the_way int)"))
        failed = await run_cli(cli_env(fake, pg_url, schema), "migrate")
        assert failed.code == 2
        assert failed.out.splitlines() == [
            f"migrating the database from 0028 to {HEAD}: 2 revisions"
        ]
        (line,) = failed.err.strip().splitlines()
        assert line.startswith("companion: cannot migrate database ")
        assert line.endswith("(it stays at 0028, each revision before the failed one kept)")
    finally:
        await engine.dispose()


# ---------------------------------------------------------------- revisions stand alone


def test_no_revision_imports_the_application():
    """A revision does today what it did when it was written: it uses alembic, SQLAlchemy,
    the standard library and third-party packages, never core/, bot/ or adapters/."""
    for path in sorted((ROOT / "migrations" / "versions").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in ("core", "bot", "adapters"), (path.name, name)


def _revision_0007():
    (path,) = (ROOT / "migrations" / "versions").glob("0007_*.py")
    spec = importlib.util.spec_from_file_location("revision_0007", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_0007_counts_a_message_as_the_application_counts_it_whole():
    frozen = _revision_0007()
    call = {"id": "c1", "type": "function", "function": {"name": "send_message"}}
    cases = [
        Message(role="user", content="remember that my cat is called Miso"),
        Message(role="system", content="memory pressure: save what matters"),
        Message(role="tool", content='{"ok": true}', tool_call_id="c1"),
        Message(
            role="assistant",
            content=None,
            tool_calls=[
                {**call, "function": {**call["function"], "arguments": '{"message": "hi"}'}}
            ],
        ),
        Message(
            role="assistant",
            content="thinking",
            tool_calls=[{**call, "function": {**call["function"], "arguments": "x" * 9000}}],
        ),
        Message(role="assistant", content="plain answer", tool_calls=[]),
        Message(role="user", content="日本語のテキスト " * 500),
        Message(role="user", content=None),
    ]
    for message in cases:
        assert frozen.tokens_of(message) == message_tokens(message, 10**12), message.role


async def test_a_database_a_newer_version_migrated_is_left_alone_in_one_line(pg_url, fake):
    engine, schema = await schema_at(pg_url, HEAD)
    try:
        async with engine.begin() as connection:
            await connection.execute(text("UPDATE alembic_version SET version_num = '9999'"))
        env = cli_env(fake, pg_url, schema)
        for command_words in (["migrate"], ["openers", "list"]):
            refused = await run_cli(env, *command_words)
            assert refused.code == 2
            assert refused.err.strip().splitlines() == [
                "companion: the database is at revision 9999, which this version of Companion "
                "does not know: a newer version migrated it; run that version (or restore a "
                "backup taken before it)"
            ]
        assert await revision_of(engine) == {"9999"}
    finally:
        await engine.dispose()


async def test_companion_migrate_exits_1_in_one_line_when_the_database_is_unreachable(fake):
    env = cli_env(fake, "postgresql://companion@127.0.0.1:9/nowhere")
    failed = await run_cli(env, "migrate")
    assert failed.code == 1
    (line,) = failed.err.strip().splitlines()
    assert line.startswith("companion: the database failed (")
    assert failed.out == ""
