"""The schemas tests get are what the migrations make: a copy (tests/conftest.py's
`SchemaCopier`) dumps exactly as a schema migrated for real, owners, grants, policies,
function bodies and planner statistics included, except for its own name and its own secret."""

from __future__ import annotations

import asyncio
import re

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from bot.database import asyncpg_url, make_engine
from tests.conftest import PG_DUMP, SECRET, _copiers, _new_schema, migrated_schema


async def dump(pg_url: str, schema: str) -> str:
    """`schema` as pg_dump prints it (owners and grants too)."""
    libpq = make_url(asyncpg_url(pg_url)).set(drivername="postgresql")
    proc = await asyncio.create_subprocess_exec(
        str(PG_DUMP),
        f"--dbname={libpq.render_as_string(hide_password=False)}",
        f"--schema={schema}",
        "--inserts",
        "--statistics",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return re.sub(r"(?m)^\\(un)?restrict .*$", "", out.decode())  # a random key per dump


def without_name_and_secret(dumped: str, schema: str) -> str:
    return SECRET.sub(r"\1SECRET\3", re.sub(rf"\b{schema}\b", "SCHEMA", dumped))


def secret_of(dumped: str) -> str:
    (found,) = SECRET.findall(dumped)
    return found[1]


async def test_a_copied_schema_is_the_migrated_schema(pg_url, schema):
    if _copiers[pg_url].script is None:
        pytest.skip("pg_dump cannot read this server: every test schema is migrated")
    copied = await _new_schema(pg_url)  # `schema` may be one an earlier test gave back
    migrated = await migrated_schema(pg_url, f"{copied}_migrated")
    copy, original = await dump(pg_url, copied), await dump(pg_url, migrated)

    same = without_name_and_secret(copy, copied)
    assert "CREATE TABLE SCHEMA.messages" in same and "FORCE ROW LEVEL SECURITY" in same
    assert "CREATE POLICY member_scope ON SCHEMA.messages" in same
    assert "pg_restore_relation_stats" in same  # the planner's statistics are compared too
    assert same.splitlines() == without_name_and_secret(original, migrated).splitlines()
    # Each copy is a fresh install: a secret of its own, not the first schema's.
    other = await dump(pg_url, await _new_schema(pg_url))
    assert len({secret_of(copy), secret_of(original), secret_of(other)}) == 3


async def test_a_new_role_makes_the_next_schema_migrate_again(pg_url, schema):
    """Migrations read the server's roles (0006 grants to `companion_member` if it exists):
    after a change of roles, copies come from a schema migrated since."""
    copier = _copiers[pg_url]
    if copier.script is None:
        pytest.skip("pg_dump cannot read this server: every test schema is migrated")
    before = copier.template
    role = f"{schema}_role"
    admin = make_engine(pg_url)
    try:
        async with admin.begin() as conn:
            await conn.execute(text(f"CREATE ROLE {role} NOLOGIN"))
        copy = await _new_schema(pg_url)
        assert copier.template not in (before, "") and role in copier.roles
        assert copy != copier.template
    finally:
        async with admin.begin() as conn:
            await conn.execute(text(f"DROP ROLE {role}"))
        await admin.dispose()
