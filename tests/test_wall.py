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
    try:
        ann = await _member_with_data(sessions, "g1", "ann", "ann-secret")
        await _member_with_data(sessions, "g1", "bob", "bob-secret")
        async with sessions() as session, session.begin():
            path = f"{schema}_shadow, pg_catalog, {schema}, public"
            await session.execute(text(f"SET LOCAL search_path = {path}"))
            await enter_scope(session, ann)
            assert await _seen(session) == {ann.agent_id}
    finally:  # the schema pool hands this test's schema on; the shadow is no part of it
        async with admin.begin() as connection:
            await connection.execute(text(f"DROP SCHEMA {schema}_shadow CASCADE"))
        await admin.dispose()


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


# SQL run inside ann's transaction as the app's own role, trying to reach bob's (or cy's)
# rows. {bob}, {tenant2} and {cy} are filled in with their ids. Issue 27 #11: the first
# two re-pointed every policy at bob before migration 0030.
TRICKS = {
    "set_config to another member": [
        "SELECT set_config('companion.agent_id', '{bob}', true)",
    ],
    "set_config to another tenant's member": [
        "SELECT set_config('companion.tenant_id', '{tenant2}', true)",
        "SELECT set_config('companion.agent_id', '{cy}', true)",
    ],
    "set_config for the session": [
        "SELECT set_config('companion.agent_id', '{bob}', false)",
    ],
    "RESET ALL (no member: every row, before)": ["RESET ALL"],
    "RESET the member": ["RESET companion.agent_id", "RESET companion.tenant_id"],
    "set_config to nothing": ["SELECT set_config('companion.agent_id', '', true)"],
    "SET ROLE to the member role, then set_config": [
        "SET LOCAL ROLE companion_member",
        "SELECT set_config('companion.agent_id', '{bob}', true)",
    ],
    "SET SESSION AUTHORIZATION": [
        "SET LOCAL SESSION AUTHORIZATION DEFAULT",
        "SELECT set_config('companion.agent_id', '{bob}', true)",
    ],
    "SET ROLE to the wall's role": ["SET LOCAL ROLE companion_wall"],
    "companion_enter again": ["SELECT companion_enter({tenant1}, {bob})"],
    "the wall's own enter": ["SELECT companion_wall.enter({tenant1}, {bob})"],
    "writing the scope table": [
        "UPDATE companion_wall.scopes SET agent = {bob} WHERE backend = pg_backend_pid()"
    ],
    "deleting from the scope table": ["DELETE FROM companion_wall.scopes"],
    "set_config in a savepoint, released": [
        "SAVEPOINT s",
        "SELECT set_config('companion.agent_id', '{bob}', true)",
        "RELEASE SAVEPOINT s",
    ],
    "a policy rewritten": ["ALTER POLICY member_scope ON messages USING (true)"],
    "a policy dropped": ["DROP POLICY member_scope ON messages"],
    "row-level security no longer forced on the owner": [
        "ALTER TABLE messages NO FORCE ROW LEVEL SECURITY"
    ],
    "the gate replaced": [
        "CREATE OR REPLACE FUNCTION companion_scope_holds() RETURNS boolean "
        "LANGUAGE sql AS 'SELECT true'"
    ],
    "a view of the owner's": ["CREATE TEMP VIEW everything AS SELECT * FROM messages"],
}


@pytest.mark.parametrize("trick", TRICKS)
async def test_no_sql_in_a_members_transaction_reaches_another_member(sessions, trick):
    """Whatever SQL runs as the app's role after `enter_scope` (an injection, a bug), it sees
    ann's rows at most: the trick is refused, the statement after it fails, or it sees the
    same rows as before."""
    ann = await _member_with_data(sessions, "g1", "ann", "ann-secret")
    bob = await _member_with_data(sessions, "g1", "bob", "bob-secret")
    cy = await _member_with_data(sessions, "g2", "cy", "cy-secret")
    ids = {"bob": bob.agent_id, "cy": cy.agent_id, "tenant1": ann.tenant_id}
    ids["tenant2"] = cy.tenant_id
    seen: set[int] = set()
    dump = ""
    try:
        async with sessions() as session, session.begin():
            await enter_scope(session, ann)
            for statement in TRICKS[trick]:
                await session.execute(text(statement.format(**ids)))
            seen = await _seen(session)
            dump = str((await session.execute(text("SELECT search_text FROM messages"))).all())
    except DBAPIError:
        pass  # refused: the transaction is over, having shown nothing of anyone else's
    assert seen <= {ann.agent_id}, trick
    assert "bob-secret" not in dump and "cy-secret" not in dump


async def test_truncate_is_refused_inside_a_members_transaction(sessions):
    """TRUNCATE passes row-level security by; inside a member's transaction it is refused."""
    ann = await _member_with_data(sessions, "g1", "ann", "ann-secret")
    await _member_with_data(sessions, "g1", "bob", "bob-secret")
    with pytest.raises(DBAPIError, match="refused inside a member's transaction"):
        async with sessions() as session, session.begin():
            await enter_scope(session, ann)
            await session.execute(text("TRUNCATE outbox"))
    async with sessions() as session:
        assert await session.scalar(text("SELECT count(*) FROM outbox")) == 2


async def test_every_member_policy_is_gated_and_the_wall_installed(sessions):
    """A table added later with its own member_scope policy must be gated too (0030's form),
    and the embedded server has the wall's event trigger."""
    async with sessions() as session:
        rows = (
            await session.execute(
                text(
                    "SELECT tablename, qual, with_check FROM pg_policies "
                    "WHERE schemaname = current_schema()"
                )
            )
        ).all()
        triggers = set(
            await session.scalars(
                text(
                    "SELECT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
                    "WHERE t.tgname = 'member_truncate' "
                    "AND c.relnamespace = current_schema()::regnamespace"
                )
            )
        )
        installed = await session.scalar(
            text("SELECT count(*) FROM pg_event_trigger WHERE evtname = 'companion_wall'")
        )
    assert {table for table, _, _ in rows} >= set(MEMBER_TABLES)
    for table, using, check in rows:
        assert "companion_scope_holds()" in using and "companion_scope_holds()" in check, table
    assert triggers == {table for table, _, _ in rows}
    assert installed == 1
