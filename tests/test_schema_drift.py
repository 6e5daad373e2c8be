"""The tables in core/models/ are the tables the migrations make, nothing more or less.

Three checks on a freshly migrated schema (the `schema` fixture: every revision replayed, or a
copy tests/test_schema_copy.py holds equal to that):

- Alembic's own comparison (`compare_metadata`, types and server defaults included): tables,
  columns, indexes by name and columns, unique constraints, foreign keys.
- What Alembic does not compare: each index the models declare is built, under another name,
  in a transaction rolled back, and Postgres' own text of it must be the migrated index's
  (so a partial index's WHERE, INCLUDE columns, the access method and operator class count).
- Primary keys, which Alembic does not compare either: the database's is the model's, or
  `tenant_id` followed by the model's (migration 0017: the classes map rows by `id`, unique
  on its own, while the key the schema would be distributed by starts with the tenant).

Slack's three tables are slack_sdk's, with no ORM class here; tests/test_slack_oauth.py
holds them to slack_sdk's stores.
"""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection, text
from sqlalchemy.schema import CreateIndex

from core.models import Base

SLACK_SDK_TABLES = {"slack_installations", "slack_bots", "slack_oauth_states"}
PROBE = "drift_probe"


def _ours(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    table = obj if type_ == "table" else getattr(obj, "table", None)
    return (name if type_ == "table" else getattr(table, "name", None)) not in SLACK_SDK_TABLES


def alembic_drift(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(
        connection,
        opts={"compare_type": True, "compare_server_default": True, "include_object": _ours},
    )
    return list(compare_metadata(context, Base.metadata))


def index_drift(connection: Connection) -> list[str]:
    """Each model index whose definition differs from the migrated one (run inside a
    transaction the caller rolls back)."""
    found = []
    for table in Base.metadata.sorted_tables:
        for index in sorted(table.indexes, key=lambda i: str(i.name)):
            ddl = str(CreateIndex(index).compile(dialect=connection.dialect))
            head = f"INDEX {index.name} ON "
            assert head in ddl, ddl
            connection.execute(text(ddl.replace(head, f"INDEX {PROBE} ON ", 1)))
            probe, migrated = (
                connection.scalar(
                    text("SELECT pg_get_indexdef(to_regclass(:name))"), {"name": name}
                )
                for name in (PROBE, str(index.name))
            )
            connection.execute(text(f"DROP INDEX {PROBE}"))
            said = (probe or "").replace(f"INDEX {PROBE} ON ", f"INDEX {index.name} ON ", 1)
            if said != migrated:
                found.append(f"{index.name}: the model makes {said!r}, migrated {migrated!r}")
    return found


def key_drift(connection: Connection) -> list[str]:
    found = []
    for table in Base.metadata.sorted_tables:
        model = [column.name for column in table.primary_key.columns]
        database = list(
            connection.scalars(
                text(
                    "SELECT a.attname FROM pg_index i "
                    "JOIN LATERAL unnest(i.indkey[0:i.indnkeyatts - 1]) WITH ORDINALITY "
                    "AS k(attnum, n) ON true "
                    "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
                    "WHERE i.indrelid = to_regclass(:table) AND i.indisprimary ORDER BY k.n"
                ),
                {"table": table.name},
            )
        )
        if database not in (model, ["tenant_id", *model]):
            found.append(f"{table.name}: the model's key is {model}, the database's {database}")
    return found


async def drift_of(sessions) -> tuple[list[Any], list[str], list[str]]:
    async with sessions() as session:
        connection = await session.connection()
        try:
            return (
                await connection.run_sync(alembic_drift),
                await connection.run_sync(index_drift),
                await connection.run_sync(key_drift),
            )
        finally:
            await session.rollback()


async def test_the_models_are_the_migrated_schema(sessions):
    differences, indexes, keys = await drift_of(sessions)
    assert differences == []
    assert indexes == []
    assert keys == []


async def test_a_drift_of_each_kind_is_found(sessions):
    """The checks above would see a change to the migrated schema that the models do not
    follow: the events' unique key without the tenant (what core/models said from 0017
    until 0030), a partial index over other rows, a primary key of other columns."""
    async with sessions() as session, session.begin():
        for change in (
            "ALTER TABLE events DROP CONSTRAINT events_agent_id_dedup_key_key, "
            "ADD CONSTRAINT events_agent_id_dedup_key_key UNIQUE (agent_id, dedup_key)",
            "DROP INDEX events_pending",
            "CREATE INDEX events_pending ON events (agent_id, id) WHERE status = 'done'",
            "ALTER TABLE summaries DROP CONSTRAINT summaries_pkey, "
            "ADD PRIMARY KEY (tenant_id, agent_id, id)",
        ):
            await session.execute(text(change))
        connection = await session.connection()
        differences = await connection.run_sync(alembic_drift)
        indexes = await connection.run_sync(index_drift)
        keys = await connection.run_sync(key_drift)
        await session.rollback()
    kinds = {(d[0], tuple(c.name for c in d[1].columns)) for d in differences}
    assert kinds == {
        ("remove_constraint", ("agent_id", "dedup_key")),
        ("add_constraint", ("tenant_id", "agent_id", "dedup_key")),
    }
    assert len(indexes) == 1 and indexes[0].startswith("events_pending:")
    assert "status)::text = 'done'" in indexes[0]
    assert keys == [
        "summaries: the model's key is ['id'], the database's ['tenant_id', 'agent_id', 'id']"
    ]
