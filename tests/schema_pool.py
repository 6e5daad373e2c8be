"""Test schemas handed out again: a schema whose test is done is made as a new copy is and
given to the next test, rather than a new copy made. Measured here (CPU of this process and
the server): a new copy 83 ms; a schema given back untouched 7 ms; one a test wrote to, 38.

    SchemaPool.take        a schema as a new copy is: one given back, made so, or a new copy
    SchemaPool.give_back   the test is done with it
    the state of a schema  one query (`STATE`, `Kept.state_sql`): the size of each table and
                           of its indexes, the rows of the tables a copy starts with
                           (alembic_version, meta, signing_secret), where each sequence
                           stands, the planner statistics of each table and index, and a
                           digest of its definitions in the catalog (`DEFINITIONS`)

A schema is made as a copy (tests/conftest.py's `SchemaCopier`) and its state read at once:
its fresh state. Taken again, its state is read; a changed definition (a test ran DDL: a
column, an index, a policy, a grant, a function, a vector's size, column statistics) means
it is never handed out again: it is dropped and a new copy made. Otherwise the tables whose
size or rows changed are truncated (with the tables that reference them), the rows a copy
starts with put back, the sequences and planner statistics set as they were, and the state
read again: the schema is handed out only if that is its fresh state, else dropped. A
schema made from an older template (the server's roles changed) is dropped too.
tests/test_schema_pool.py shows that each can fail.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import asyncpg
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

# The schema `ns`, its objects `named` (everything Postgres files under a schema: tables,
# sequences, views, functions, types, operators... each depends on it in pg_depend), its
# tables and sequences `tab`, and these with their indexes `rel`: found through indexes
# only (scanning pg_class or pg_proc for a schema's rows reads every schema's).
OBJECTS = """
WITH ns AS (SELECT CAST(:schema AS regnamespace) AS oid),
named AS (SELECT d.classid, d.objid, d.xmin FROM pg_depend d JOIN ns
          ON d.refclassid = 'pg_namespace'::regclass AND d.refobjid = ns.oid),
tab AS (SELECT c.* FROM pg_class c JOIN named
        ON named.classid = 'pg_class'::regclass AND c.oid = named.objid),
rel AS (SELECT * FROM tab UNION ALL
        SELECT c.* FROM pg_index i JOIN tab ON i.indrelid = tab.oid
        JOIN pg_class c ON c.oid = i.indexrelid)
"""

# Every definition pg_dump would print of a schema but its rows, sequence positions and table
# statistics, as one digest: its relations (what TRUNCATE and the statistics leave alone of
# them), the transaction that last wrote each other catalog row of its objects (DDL writes a
# row anew: a column, an index, a policy, a grant on a function, a comment, a function...),
# and how many column statistics ANALYZE left. Catalog: (its rows of the schema, in order).
CATALOG_ROWS = {
    "pg_namespace": ("JOIN ns ON x.oid = ns.oid", "x.oid"),
    "pg_depend": (  # what is in the schema, and on what each relation depends
        "WHERE (x.refclassid = 'pg_namespace'::regclass AND x.refobjid = (SELECT oid FROM ns))"
        " OR (x.classid = 'pg_class'::regclass AND x.objid IN (SELECT oid FROM rel))",
        "x.classid, x.objid, x.objsubid, x.refclassid, x.refobjid, x.refobjsubid",
    ),
    "pg_attribute": ("JOIN rel ON rel.oid = x.attrelid", "x.attrelid, x.attnum"),
    "pg_index": ("JOIN rel ON rel.oid = x.indrelid", "x.indexrelid"),
    "pg_attrdef": ("JOIN rel ON rel.oid = x.adrelid", "x.oid"),
    "pg_constraint": ("JOIN rel ON rel.oid = x.conrelid", "x.oid"),
    "pg_policy": ("JOIN rel ON rel.oid = x.polrelid", "x.oid"),
    "pg_trigger": ("JOIN rel ON rel.oid = x.tgrelid", "x.oid"),
    "pg_rewrite": ("JOIN rel ON rel.oid = x.ev_class", "x.oid"),
    "pg_sequence": ("JOIN rel ON rel.oid = x.seqrelid", "x.seqrelid"),
    "pg_proc": (
        "JOIN named ON named.classid = 'pg_proc'::regclass AND x.oid = named.objid",
        "x.oid",
    ),
    "pg_type": (
        "WHERE x.oid IN (SELECT reltype FROM rel UNION ALL SELECT objid FROM named"
        " WHERE classid = 'pg_type'::regclass)",
        "x.oid",
    ),
    "pg_default_acl": ("JOIN ns ON x.defaclnamespace = ns.oid", "x.oid"),
    "pg_description": (  # comments on the schema's tables, columns, functions, constraints...
        "WHERE x.objoid IN (SELECT oid FROM rel UNION ALL SELECT objid FROM named UNION ALL"
        " SELECT c.oid FROM pg_constraint c JOIN rel ON rel.oid = c.conrelid UNION ALL"
        " SELECT t.oid FROM pg_trigger t JOIN rel ON rel.oid = t.tgrelid UNION ALL"
        " SELECT p.oid FROM pg_policy p JOIN rel ON rel.oid = p.polrelid)",
        "x.objoid, x.classoid, x.objsubid",
    ),
}
RELATION = """concat_ws(' ', oid, relname, relkind, relowner, relacl, reloptions, reltype,
    reloftype, relam, relpersistence, relreplident, relrowsecurity, relforcerowsecurity,
    relispartition, relchecks, relhasrules, relhastriggers, relnatts, reltoastrelid)"""
DEFINITIONS = (
    "SELECT md5(concat_ws('|',\n  "
    + ",\n  ".join(
        [
            f"(SELECT string_agg({RELATION}, ';' ORDER BY oid) FROM rel)",
            *(
                f"(SELECT string_agg(x.xmin::text, ' ' ORDER BY {order}) FROM {catalog} x {which})"
                for catalog, (which, order) in CATALOG_ROWS.items()
            ),
            "(SELECT count(*) FROM pg_statistic x JOIN rel ON rel.oid = x.starelid)",
            "(SELECT count(*) FROM pg_inherits x JOIN rel ON rel.oid = x.inhrelid)",
        ]
    )
    + "\n))"
)

# The state of a schema, as rows of (what, its state); the rows of the tables a copy starts
# with are added per schema (`Kept.state_sql`).
STATE = f"""{OBJECTS}
SELECT 'table ' || relname, concat_ws(' ', pg_relation_size(oid),
       pg_relation_size(NULLIF(reltoastrelid, 0)),
       (SELECT string_agg(pg_relation_size(indexrelid)::text, ' ' ORDER BY indexrelid)
          FROM pg_index WHERE indrelid = rel.oid))
  FROM rel WHERE relkind IN ('r', 'p')
UNION ALL
SELECT 'sequence ' || relname, coalesce(pg_sequence_last_value(oid)::text, 'unused')
  FROM rel WHERE relkind = 'S'
UNION ALL
SELECT 'statistics ' || relname, concat_ws(' ', relpages, reltuples, relallvisible, relallfrozen)
  FROM rel WHERE relkind IN ('r', 'p', 'i', 'm')
UNION ALL
SELECT 'definitions', ({DEFINITIONS})
"""


def quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass
class Kept:
    """A schema of the pool, and what it was when made."""

    name: str
    template: str
    fresh: dict[str, str]  # its state as made
    seeds: dict[str, str]  # table -> the INSERTs a copy starts it with
    referenced_by: dict[str, set[str]]  # table -> the tables with a foreign key to it

    def state_sql(self) -> str:
        rows = "".join(
            f"UNION ALL SELECT 'rows {table}', (SELECT md5(string_agg(t::text, ',' ORDER BY "
            f"t::text)) FROM {quoted(self.name)}.{quoted(table)} t)\n"
            for table in sorted(self.seeds)
        )
        return STATE + rows

    def statistics_sql(self) -> str:
        """Puts back the planner statistics each table and index had when made (TRUNCATE
        sets a table's to 'never counted', and an index's to its new size)."""
        values = ", ".join(
            f"({_literal(what.removeprefix('statistics '))}, {int(pages)}, "
            f"CAST({float(tuples)} AS real), {int(visible)}, {int(frozen)})"
            for what, state in sorted(self.fresh.items())
            if what.startswith("statistics ")
            for pages, tuples, visible, frozen in [state.split(" ")]
        )
        return f"""
            SELECT count(pg_restore_relation_stats(
                'schemaname', {_literal(self.name)}, 'relname', e.name, 'relpages', e.pages,
                'reltuples', e.tuples, 'relallvisible', e.visible, 'relallfrozen', e.frozen))
            FROM (VALUES {values}) AS e(name, pages, tuples, visible, frozen)
            JOIN pg_class c ON c.relname = e.name
                AND c.relnamespace = CAST({_literal(self.name)} AS regnamespace)
            WHERE (c.relpages, c.reltuples, c.relallvisible, c.relallfrozen)
                IS DISTINCT FROM (e.pages, e.tuples, e.visible, e.frozen)
        """


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


class SchemaPool:
    """The schemas of one server that tests are done with, made fresh again to be reused.

    `copy(name)` makes a new schema named `name` and returns the SQL of the rows it starts
    with, or None when the schema cannot be reused (then each test gets a new one);
    `template()` names the schema copies are made from now."""

    def __init__(
        self,
        admin: AsyncEngine,
        copy: Callable[[str], Awaitable[str | None]],
        template: Callable[[], Awaitable[str]],
        names: Callable[[], str],
    ) -> None:
        self.admin = admin  # as the server's superuser (row-level security hides no row)
        self.copy, self.template, self.names = copy, template, names
        self.free: list[Kept] = []
        self.lent: dict[str, Kept] = {}
        self.dropped: list[str] = []  # the schemas found changed (tests/test_schema_pool.py)

    async def take(self) -> str:
        template = await self.template()
        while self.free:
            kept = self.free.pop()
            if kept.template == template and await self._made_fresh(kept):
                self.lent[kept.name] = kept
                return kept.name
            await self._drop(kept.name)
        name = self.names()
        data = await self.copy(name)
        if data is not None:
            self.lent[name] = await self._kept(name, template, data)
        return name

    def give_back(self, name: str) -> None:
        kept = self.lent.pop(name, None)
        if kept is not None:
            self.free.append(kept)

    async def _kept(self, name: str, template: str, data: str) -> Kept:
        seeds = _rows_by_table(data)
        kept = Kept(name, template, {}, seeds, {})
        async with self.admin.connect() as conn:
            kept.fresh = await _state(conn, kept)
            references = await conn.execute(
                text(
                    "SELECT confrelid::regclass::text, conrelid::regclass::text FROM pg_constraint "
                    "WHERE contype = 'f' AND connamespace = CAST(:schema AS regnamespace)"
                ),
                {"schema": name},
            )
            await conn.rollback()
        for referenced, referencing in references:
            kept.referenced_by.setdefault(_bare(referenced), set()).add(_bare(referencing))
        return kept

    async def _made_fresh(self, kept: Kept) -> bool:
        """Make `kept` as it was made, if only its rows, sequences and statistics changed."""
        async with self.admin.connect() as conn:
            try:
                now = await _state(conn, kept)
            except DBAPIError:  # the test dropped or renamed the schema
                return False
            await conn.rollback()
            if now.keys() != kept.fresh.keys() or now["definitions"] != kept.fresh["definitions"]:
                return False
            changed = {what for what, state in now.items() if kept.fresh[what] != state}
            if not changed:
                return True
            if not await _run(conn, self._reset_script(kept, changed)):
                return False
            now = await _state(conn, kept)
            await conn.rollback()
        return now == kept.fresh

    def _reset_script(self, kept: Kept, changed: set[str]) -> str:
        dirty = {what.split(" ", 1)[1] for what in changed if what.startswith(("table ", "rows "))}
        truncated = _with_referencing(dirty, kept.referenced_by)
        schema = quoted(kept.name)
        steps = [LOCK_TIMEOUT]
        if truncated:
            tables = ", ".join(f"{schema}.{quoted(table)}" for table in sorted(truncated))
            steps.append(f"TRUNCATE {tables}")
            steps += [kept.seeds[t] for t in sorted(truncated) if t in kept.seeds]
        for what in sorted(changed):
            if what.startswith("sequence "):
                sequence = _literal(f"{schema}.{quoted(what.split(' ', 1)[1])}")
                at = kept.fresh[what]
                if at == "unused":
                    steps.append(
                        f"SELECT setval({sequence}, seqstart, false) FROM pg_sequence "
                        f"WHERE seqrelid = CAST({sequence} AS regclass)"
                    )
                else:
                    steps.append(f"SELECT setval({sequence}, {int(at)}, true)")
        steps.append(kept.statistics_sql())
        return ";\n".join(steps)

    async def _drop(self, name: str) -> None:
        """Drop a schema found changed, unless a test's connection still holds part of it."""
        self.dropped.append(name)
        async with self.admin.connect() as conn:
            await _run(conn, f"{LOCK_TIMEOUT}; DROP SCHEMA {quoted(name)} CASCADE")


# A test's connection still in a transaction on a table (a test that leaked it) makes the
# upkeep give up on that schema rather than wait.
LOCK_TIMEOUT = "SET lock_timeout = '2s'"


async def _run(conn: AsyncConnection, script: str) -> bool:
    """Run `script` (statements separated by semicolons) as one transaction; whether it was
    applied (not if it waited out the lock timeout or failed)."""
    raw = await conn.get_raw_connection()
    try:
        await raw.driver_connection.execute(script)  # type: ignore[union-attr]
    except asyncpg.PostgresError:
        return False
    return True


async def _state(conn: AsyncConnection, kept: Kept) -> dict[str, str]:
    rows = await conn.execute(text(kept.state_sql()), {"schema": kept.name})
    return {what: state or "" for what, state in rows}


def _bare(name: str) -> str:
    """A table's name as regclass::text prints it, without its schema."""
    return name.rsplit(".", 1)[-1].strip('"')


def _with_referencing(tables: set[str], referenced_by: dict[str, set[str]]) -> set[str]:
    """`tables` and every table that references one of them, directly or not (TRUNCATE
    refuses to empty a table another one still points to)."""
    found, todo = set(tables), list(tables)
    while todo:
        for other in referenced_by.get(todo.pop(), ()):
            if other not in found:
                found.add(other)
                todo.append(other)
    return found


_DATA = re.compile(r"(?m)^INSERT INTO [^ ]+?\.(\w+) VALUES .*;$")


def _rows_by_table(data: str) -> dict[str, str]:
    """The INSERT statements of `data`, by table."""
    rows: dict[str, list[str]] = {}
    for match in _DATA.finditer(data):
        rows.setdefault(match[1], []).append(match[0].rstrip(";"))
    return {table: ";\n".join(statements) for table, statements in rows.items()}
