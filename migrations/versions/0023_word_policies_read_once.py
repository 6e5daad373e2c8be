"""The word indexes' wall reads the member once per statement, not once per row.

    message_words, passage_words    policy member_scope: the same rows as 0009's, with the
                                    member read by sub-selects (evaluated once, as InitPlans)

A key-word search reads every index entry of the query's words: 28,000 entries for a
three-word question at 100,000 messages. Written as 0009 wrote it, the policy evaluated
`current_setting` and a text-to-bigint cast three or four times for each entry, two thirds
of that scan (17 -> 6 ms under EXPLAIN ANALYZE). `recall_search` with words and a vector,
100 questions at 100,000 messages (bench/search.py's data): 25-26 -> 18-22 ms median,
36-40 -> 26-29 ms p95.

Only these two tables: on the others the planner's row estimates rely on reading the
member at plan time (Postgres evaluates a stable expression such as `current_setting` for
its estimates, but cannot see into a sub-select), and with the sub-selects the search for
nearest vectors left its HNSW index for a sequential scan (11 -> 227 ms). A word lookup is
an index scan by (tenant, agent, word) whatever the estimate.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-02
"""

from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

TABLES = ("message_words", "passage_words")
AGENT = "NULLIF(current_setting('companion.agent_id', true), '')::bigint"
TENANT = "NULLIF(current_setting('companion.tenant_id', true), '')::bigint"


def _scope(agent: str, tenant: str) -> str:
    return f"{agent} IS NULL OR (tenant_id = {tenant} AND agent_id = {agent})"  # as 0009


def upgrade() -> None:
    scope = _scope(f"(SELECT {AGENT})", f"(SELECT {TENANT})")
    for table in TABLES:
        op.execute(f"ALTER POLICY member_scope ON {table} USING ({scope}) WITH CHECK ({scope})")


def downgrade() -> None:
    scope = _scope(AGENT, TENANT)
    for table in TABLES:
        op.execute(f"ALTER POLICY member_scope ON {table} USING ({scope}) WITH CHECK ({scope})")
