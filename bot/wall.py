"""The part of the second wall that the app's own role must not be able to move.

Row-level security (migrations 0006, 0009, 0030) shows a member's transaction only that
member's rows. The policies read the member from the settings `companion.tenant_id` and
`companion.agent_id` (cheap to read for every row), but any SQL running as the app's role
can `set_config` them. So `companion_enter` also records the member where that role cannot
write, and every policy checks, once per statement, that the settings still name the member
recorded for this transaction (`companion_wall.holds`, an error otherwise).

    companion_wall            a role nobody logs in as and the app's role is not granted
    companion_wall.scopes     one row per backend: the transaction it entered and for whom
                              (unlogged: it lives as long as the transaction it names)
    companion_wall.enter      records the member (SECURITY DEFINER), refuses a second one
    companion_wall.holds      the settings still name the recorded member (or none was)
    companion_wall.scoped     whether this transaction works for a member
    event trigger             refuses DDL inside a member's transaction: the app's role owns
                              the tables, so it could otherwise drop a policy or stop forcing
                              row-level security on itself for the rest of the transaction

Only a superuser can create an event trigger, so this is installed by one: the embedded
server's superuser (`bot.database.serve_as_app_role`, on every start), or an operator once
on a server of their own (`python -m bot.wall` prints the SQL). Without it, `companion_enter`
only sets the settings, as before 0030, and `companion doctor` says so.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

ROLE = "companion_wall"

SQL = """
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'companion_wall') THEN
        CREATE ROLE companion_wall NOLOGIN;
    END IF;
END $$;
CREATE SCHEMA IF NOT EXISTS companion_wall AUTHORIZATION companion_wall;
GRANT USAGE ON SCHEMA companion_wall TO PUBLIC;
CREATE UNLOGGED TABLE IF NOT EXISTS companion_wall.scopes (
    backend integer PRIMARY KEY,
    xact xid8 NOT NULL,
    tenant bigint NOT NULL,
    agent bigint NOT NULL
);
ALTER TABLE companion_wall.scopes OWNER TO companion_wall;
REVOKE ALL ON companion_wall.scopes FROM PUBLIC;

CREATE OR REPLACE FUNCTION companion_wall.enter(tenant bigint, agent bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $f$
DECLARE
    here xid8 := pg_current_xact_id();
    held companion_wall.scopes;
BEGIN
    SELECT * INTO held FROM companion_wall.scopes WHERE backend = pg_backend_pid();
    IF held.xact = here AND (held.tenant, held.agent) IS DISTINCT FROM (tenant, agent) THEN
        RAISE EXCEPTION 'this transaction works for agent %, not for agent %', held.agent, agent
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    INSERT INTO companion_wall.scopes AS s VALUES (pg_backend_pid(), here, tenant, agent)
    ON CONFLICT (backend) DO UPDATE
        SET xact = excluded.xact, tenant = excluded.tenant, agent = excluded.agent;
    PERFORM set_config('companion.tenant_id', tenant::text, true);
    PERFORM set_config('companion.agent_id', agent::text, true);
END $f$;

CREATE OR REPLACE FUNCTION companion_wall.holds() RETURNS boolean
LANGUAGE plpgsql STABLE PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $f$
DECLARE
    held companion_wall.scopes;
    agent text := NULLIF(current_setting('companion.agent_id', true), '');
    tenant text := NULLIF(current_setting('companion.tenant_id', true), '');
BEGIN
    SELECT * INTO held FROM companion_wall.scopes
    WHERE backend = pg_backend_pid() AND xact = pg_current_xact_id_if_assigned();
    IF (held.tenant::text, held.agent::text) IS DISTINCT FROM (tenant, agent) THEN
        RAISE EXCEPTION 'this transaction works for agent %, but its settings name agent %',
            coalesce(held.agent::text, 'none'), coalesce(agent, 'none')
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN true;
END $f$;

CREATE OR REPLACE FUNCTION companion_wall.scoped() RETURNS boolean
LANGUAGE sql STABLE PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $f$
    SELECT EXISTS (SELECT 1 FROM companion_wall.scopes
                   WHERE backend = pg_backend_pid() AND xact = pg_current_xact_id_if_assigned())
$f$;

CREATE OR REPLACE FUNCTION companion_wall.refuse_ddl() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $f$
BEGIN
    IF companion_wall.scoped() THEN
        RAISE EXCEPTION '% is refused inside a member''s transaction', tg_tag
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END $f$;

ALTER FUNCTION companion_wall.enter(bigint, bigint) OWNER TO companion_wall;
ALTER FUNCTION companion_wall.holds() OWNER TO companion_wall;
ALTER FUNCTION companion_wall.scoped() OWNER TO companion_wall;
ALTER FUNCTION companion_wall.refuse_ddl() OWNER TO companion_wall;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = 'companion_wall') THEN
        CREATE EVENT TRIGGER companion_wall ON ddl_command_start
            EXECUTE FUNCTION companion_wall.refuse_ddl();
    END IF;
END $$;
"""


VERSION = "companion wall 1"  # change with SQL: a database with another version re-runs it
SQL += f"COMMENT ON SCHEMA companion_wall IS '{VERSION}';\n"


async def install(connection: AsyncConnection) -> None:
    """Create or update the wall's own objects (as a superuser; in the caller's transaction),
    unless this version of them is there: one query on most starts."""
    held = await connection.scalar(
        text("SELECT obj_description(to_regnamespace('companion_wall'), 'pg_namespace')")
    )
    if held == VERSION and await installed(connection):
        return
    raw = await connection.get_raw_connection()
    driver: Any = raw.driver_connection
    await driver.execute(SQL)  # several statements: asyncpg's simple protocol


async def installed(connection: AsyncConnection) -> bool:
    """Whether this database has the wall and an event trigger enforcing it."""
    return bool(
        await connection.scalar(
            text(
                "SELECT to_regprocedure('companion_wall.holds()') IS NOT NULL AND EXISTS "
                "(SELECT 1 FROM pg_event_trigger WHERE evtname = 'companion_wall' "
                "AND evtenabled <> 'D')"
            )
        )
    )


if __name__ == "__main__":  # the SQL an operator's superuser runs once per database
    print(SQL.strip())
