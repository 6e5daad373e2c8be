"""The second wall holds against any SQL run in a member's transaction, not only ours.

    companion_enter(tenant, agent)   records the member with `companion_wall.enter` where
                                     the database has the wall (bot/wall.py), else as 0009
    companion_scope_holds()          once per statement: the settings still name the member
                                     this transaction entered (an error if not)
    every member_scope policy        gated by it: NULLIF((SELECT companion_scope_holds()),
                                     false) IS NOT NULL AND (the policy as it was)
    member_truncate triggers         TRUNCATE (which row-level security does not see) is
                                     refused inside a member's transaction

Until now the policies trusted the settings `companion.tenant_id` and `companion.agent_id`,
which SQL running as the app's own role can `set_config` (or RESET) inside a member's
transaction, re-pointing every policy at another member. The member is now also recorded by
a function of the role `companion_wall`, which the app's role cannot become, in a table it
cannot write, keyed by the backend and its transaction; a second member in one transaction
is refused there. The policies still compare each row with the settings (a few hundred
nanoseconds a row, and the planner estimates rows by the member's own statistics), and one
sub-select per table and statement checks the settings against the record. Its form keeps
the planner's estimates: a Var-free clause of a policy is not lifted into a one-time filter,
and a boolean parameter would halve every row estimate, while `IS NOT NULL` of an
expression is estimated at 0.995.

Where the wall is not installed (a server without a superuser's one-time SQL),
`companion_scope_holds` is true and the settings alone scope a transaction, as before.

Revision ID: 0030_wall
Revises: 0030_indexes
Create Date: 2026-12-04
"""

from alembic import op
from sqlalchemy import text

revision = "0030_wall"
down_revision = "0030_indexes"
branch_labels = None
depends_on = None

GATE = "NULLIF((SELECT companion_scope_holds()), false) IS NOT NULL"

HOLDS = """
CREATE FUNCTION companion_scope_holds() RETURNS boolean
LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF to_regprocedure('companion_wall.holds()') IS NULL THEN
        RETURN true;  -- no wall installed: the settings alone, as before 0030
    END IF;
    RETURN companion_wall.holds();
END $$;
"""

REFUSE_TRUNCATE = """
CREATE FUNCTION companion_refuse_truncate() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF (CASE WHEN to_regprocedure('companion_wall.scoped()') IS NULL
             THEN NULLIF(current_setting('companion.agent_id', true), '') IS NOT NULL
             ELSE companion_wall.scoped() END) THEN
        RAISE EXCEPTION 'TRUNCATE % is refused inside a member''s transaction', TG_TABLE_NAME
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NULL;
END $$;
"""

ENTER = """
CREATE OR REPLACE FUNCTION companion_enter(tenant bigint, agent bigint) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    entered text := NULLIF(current_setting('companion.agent_id', true), '');
BEGIN
    IF to_regprocedure('companion_wall.enter(bigint,bigint)') IS NOT NULL THEN
        PERFORM companion_wall.enter(tenant, agent);  -- records, refuses a second member
    ELSE
        IF entered IS NOT NULL AND entered <> agent::text THEN
            RAISE EXCEPTION 'this transaction works for agent %, not for agent %', entered, agent
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        PERFORM set_config('companion.tenant_id', tenant::text, true);
        PERFORM set_config('companion.agent_id', agent::text, true);
    END IF;
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

ENTER_0009 = """
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


def _policies() -> list[tuple[str, str, str]]:
    """(table, USING, WITH CHECK) of every member_scope policy in this schema."""
    rows = op.get_bind().execute(
        text(
            "SELECT tablename, qual, with_check FROM pg_policies "
            "WHERE schemaname = current_schema() AND policyname = 'member_scope' ORDER BY 1"
        )
    )
    return [(str(table), str(using), str(check)) for table, using, check in rows]


def _gated_prefix() -> str:
    """The gate as Postgres writes it back in pg_policies (read on a throwaway policy)."""
    bind = op.get_bind()
    bind.execute(text("CREATE TEMP TABLE companion_gate_probe (x int)"))
    bind.execute(text(f"CREATE POLICY probe ON companion_gate_probe USING ({GATE} AND x = 1)"))
    written = bind.scalar(
        text("SELECT qual FROM pg_policies WHERE tablename = 'companion_gate_probe'")
    )
    bind.execute(text("DROP TABLE companion_gate_probe"))
    return str(written).removesuffix("(x = 1))")  # "(<gate> AND "


def _messages_table() -> str:
    bind = op.get_bind()
    schema = bind.scalar(text("SELECT current_schema()"))
    return f"{bind.dialect.identifier_preparer.quote(schema)}.messages"


def upgrade() -> None:
    op.execute(HOLDS)
    op.execute(REFUSE_TRUNCATE)
    op.execute(ENTER.replace("{messages}", _messages_table().replace("'", "''")))
    for table, using, check in _policies():
        op.execute(
            f"ALTER POLICY member_scope ON {table} "
            f"USING ({GATE} AND ({using})) WITH CHECK ({GATE} AND ({check}))"
        )
        op.execute(
            f"CREATE TRIGGER member_truncate BEFORE TRUNCATE ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION companion_refuse_truncate()"
        )


def downgrade() -> None:
    prefix = _gated_prefix()
    for table, using, check in _policies():
        parts = []
        for written in (using, check):
            if not written.startswith(prefix) or not written.endswith(")"):
                raise RuntimeError(f"the policy of {table} is not 0030's: {written}")
            parts.append(written[len(prefix) : -1])
        using, check = parts
        op.execute(f"ALTER POLICY member_scope ON {table} USING ({using}) WITH CHECK ({check})")
        op.execute(f"DROP TRIGGER member_truncate ON {table}")
    op.execute(ENTER_0009.replace("{messages}", _messages_table().replace("'", "''")))
    op.execute("DROP FUNCTION companion_refuse_truncate()")
    op.execute("DROP FUNCTION companion_scope_holds()")
