"""The second wall binds the connection's own role, so no member transaction can leave it.

0006 walled a member's transaction in by switching to the role `companion_member`: a
`RESET ROLE` left the wall, and on a server where that role could not be created (managed
Postgres without CREATEROLE) `companion_enter` failed in every member transaction. Now:

- Every table holding member data has FORCE ROW LEVEL SECURITY: the policies bind the
  tables' owner too, which is the role Companion connects as (the embedded database's
  `companion_app`, a managed server's DATABASE_URL user). Only superusers and BYPASSRLS
  roles pass policies by, and `companion doctor` warns about them.
- The policies read the scope `companion_enter` recorded for the transaction. With none
  (operator-wide work: migrations, the scheduler's claims, CLI exports) every row shows;
  inside a member's transaction only that member's rows show, whatever role it runs as.
- `companion_enter` pins its search_path, refuses to move a transaction from one member to
  another, and switches to `companion_member` only where the connection passes policies by
  (superuser, BYPASSRLS) and that role may read this schema: there, switching is the only
  wall the database can give.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from alembic import op
from sqlalchemy import text

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

AGENT_TABLES = ("blocks", "messages", "summaries", "passages", "events", "outbox")
AGENT = "NULLIF(current_setting('companion.agent_id', true), '')::bigint"
TENANT = "NULLIF(current_setting('companion.tenant_id', true), '')::bigint"
OPERATOR = f"{AGENT} IS NULL"  # no member entered: work for no single member
SCOPES = {
    **{table: f"tenant_id = {TENANT} AND agent_id = {AGENT}" for table in AGENT_TABLES},
    "usage": f"tenant_id = {TENANT}",  # token counts only: the tenant's daily budget sums them
    "agents": f"tenant_id = {TENANT} AND id = {AGENT}",
    "users": f"tenant_id = {TENANT} AND id = (SELECT a.user_id FROM agents a WHERE a.id = {AGENT})",
    "tenants": f"id = {TENANT}",
}

ENTER = """
CREATE OR REPLACE FUNCTION companion_enter(tenant bigint, agent bigint) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    entered text := NULLIF(current_setting('companion.agent_id', true), '');
BEGIN
    IF entered IS NOT NULL AND entered <> agent::text THEN
        RAISE EXCEPTION 'this transaction works for agent %, not for agent %', entered, agent
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    PERFORM set_config('companion.tenant_id', tenant::text, true);
    PERFORM set_config('companion.agent_id', agent::text, true);
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = current_user AND (rolsuper OR rolbypassrls))
       AND EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'companion_member')
    THEN
        IF pg_has_role(session_user, 'companion_member', 'MEMBER')
           AND has_table_privilege('companion_member', '{messages}', 'SELECT')
        THEN
            SET LOCAL ROLE companion_member;
        END IF;
    END IF;
END $$;
"""

ENTER_0006 = """
CREATE OR REPLACE FUNCTION companion_enter(tenant bigint, agent bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('companion.tenant_id', tenant::text, true);
    PERFORM set_config('companion.agent_id', agent::text, true);
    IF pg_has_role(session_user, 'companion_member', 'MEMBER') THEN
        SET LOCAL ROLE companion_member;
    END IF;
END $$;
"""
SCOPES_0006 = {
    **{
        table: "tenant_id = current_setting('companion.tenant_id')::bigint AND agent_id = "
        "current_setting('companion.agent_id')::bigint"
        for table in AGENT_TABLES
    },
    "usage": "tenant_id = current_setting('companion.tenant_id')::bigint",
    "agents": "tenant_id = current_setting('companion.tenant_id')::bigint "
    "AND id = current_setting('companion.agent_id')::bigint",
    "users": "tenant_id = current_setting('companion.tenant_id')::bigint AND id = (SELECT "
    "a.user_id FROM agents a WHERE a.id = current_setting('companion.agent_id')::bigint)",
    "tenants": "id = current_setting('companion.tenant_id')::bigint",
}


def _messages_table() -> str:
    """This schema's messages table, by qualified name (the function's search_path is pinned)."""
    bind = op.get_bind()
    schema = bind.scalar(text("SELECT current_schema()"))
    return f"{bind.dialect.identifier_preparer.quote(schema)}.messages"


def upgrade() -> None:
    for table, scope in SCOPES.items():
        op.execute(f"DROP POLICY member_scope ON {table}")
        op.execute(
            f"CREATE POLICY member_scope ON {table} "
            f"USING ({OPERATOR} OR ({scope})) WITH CHECK ({OPERATOR} OR ({scope}))"
        )
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
    op.execute(ENTER.replace("{messages}", _messages_table().replace("'", "''")))


def downgrade() -> None:
    op.execute(ENTER_0006)
    for table, scope in SCOPES_0006.items():
        op.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
        op.execute(f"DROP POLICY member_scope ON {table}")
        op.execute(f"CREATE POLICY member_scope ON {table} USING ({scope}) WITH CHECK ({scope})")
