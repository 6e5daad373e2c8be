"""The second wall cannot be left from inside a member's transaction by the usual slips.

The threat is a query bug or a forgotten filter in Companion's own code (members never
write SQL). Inside `enter_scope`: resetting the role, asking Postgres to skip the policies,
a search_path that shadows built-in functions, or entering a second member's scope widen
nothing. Companion serves the database as an ordinary role (no superuser), which the
policies bind.
"""

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from bot.database import make_engine
from core.config import EngineConfig
from core.directory import ensure_agent
from core.memory.store import AgentStore
from core.scope import enter_scope
from tests.test_rls import NOW, _member_with_data

MEMBER_TABLES = [
    "agents",
    "blocks",
    "messages",
    "message_vectors",
    "message_terms",
    "message_words",
    "summaries",
    "passages",
    "passage_vectors",
    "passage_terms",
    "passage_words",
    "events",
    "outbox",
]


async def _seen(session) -> set[int]:
    """Every agent id an unfiltered query can see, over all member tables."""
    seen: set[int] = set()
    for table in MEMBER_TABLES:
        column = "id" if table == "agents" else "agent_id"
        seen |= set((await session.execute(text(f"SELECT {column} FROM {table}"))).scalars())
    return seen


async def test_companion_serves_as_an_ordinary_role(sessions):
    async with sessions() as session:
        superuser, bypass = (
            await session.execute(
                text("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user")
            )
        ).one()
    assert (superuser, bypass) == (False, False)


@pytest.mark.parametrize(
    "slip",
    [
        "RESET ROLE",
        "SET LOCAL ROLE NONE",
        "SET LOCAL SESSION AUTHORIZATION DEFAULT",
    ],
)
async def test_leaving_the_role_does_not_leave_the_scope(sessions, slip):
    ann = await _member_with_data(sessions, "g1", "ann", "ann-secret")
    await _member_with_data(sessions, "g1", "bob", "bob-secret")
    await _member_with_data(sessions, "g2", "cy", "cy-secret")
    async with sessions() as session, session.begin():
        await enter_scope(session, ann)
        await session.execute(text(slip))
        assert await _seen(session) == {ann.agent_id}
        dump = str((await session.execute(text("SELECT search_text FROM messages"))).all())
        assert "bob-secret" not in dump and "cy-secret" not in dump


async def test_skipping_the_policies_is_refused_not_granted(sessions):
    ann = await _member_with_data(sessions, "g1", "ann", "ann-secret")
    await _member_with_data(sessions, "g1", "bob", "bob-secret")
    with pytest.raises(DBAPIError, match="row-level security"):
        async with sessions() as session, session.begin():
            await enter_scope(session, ann)
            await session.execute(text("SET LOCAL row_security = off"))
            await session.execute(text("SELECT * FROM messages"))


async def test_a_transaction_works_for_one_member_only(sessions):
    ann = await _member_with_data(sessions, "g1", "ann", "ann-secret")
    bob = await _member_with_data(sessions, "g1", "bob", "bob-secret")
    with pytest.raises(DBAPIError, match=f"works for agent {ann.agent_id}"):
        async with sessions() as session, session.begin():
            await enter_scope(session, ann)
            await enter_scope(session, bob)
    async with sessions() as session, session.begin():  # entering the same one again is fine
        await enter_scope(session, ann)
        await enter_scope(session, ann)
        assert await _seen(session) == {ann.agent_id}


async def test_a_shadowing_search_path_cannot_unset_the_scope(pg_url, schema, sessions):
    """`companion_enter` pins its search_path: a schema earlier in the caller's path with its
    own `set_config` (say, left by an extension) cannot swallow the scope."""
    admin = make_engine(pg_url)
    async with admin.begin() as connection:
        await connection.execute(text(f"CREATE SCHEMA {schema}_shadow"))
        await connection.execute(
            text(
                f"CREATE FUNCTION {schema}_shadow.set_config(text, text, boolean) RETURNS text "
                "LANGUAGE sql AS $$ SELECT ''::text $$"
            )
        )
        await connection.execute(text(f"GRANT USAGE ON SCHEMA {schema}_shadow TO PUBLIC"))
    await admin.dispose()
    ann = await _member_with_data(sessions, "g1", "ann", "ann-secret")
    await _member_with_data(sessions, "g1", "bob", "bob-secret")
    async with sessions() as session, session.begin():
        path = f"{schema}_shadow, pg_catalog, {schema}, public"
        await session.execute(text(f"SET LOCAL search_path = {path}"))
        await enter_scope(session, ann)
        assert await _seen(session) == {ann.agent_id}


async def test_operator_work_outside_any_scope_sees_every_member(sessions):
    """The wall is no obstacle to work for no single member (scheduler, exports)."""
    scopes = [await _member_with_data(sessions, "g1", n, f"{n}-secret") for n in ("ann", "bob")]
    async with sessions() as session, session.begin():
        assert await _seen(session) == {s.agent_id for s in scopes}
        scope = await ensure_agent(session, "g2", "cy", EngineConfig())
        store = AgentStore(session, scope, EngineConfig().max_message_tokens)
        await store.append(NOW, role="user", content="hi", search_text="hi")
    async with sessions() as session:
        assert await session.scalar(text("SELECT count(*) FROM messages")) == 3
