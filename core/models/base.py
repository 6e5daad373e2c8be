"""What every table shares: the declarative base and the shapes of its keys."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
)
from sqlalchemy import text as sql  # a column here is called `text`
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

TS = DateTime(timezone=True)


class Base(DeclarativeBase):
    pass


def tenant_fk() -> Mapped[int]:
    return mapped_column(BigInteger, ForeignKey("tenants.id", ondelete="CASCADE"), index=False)


def tenant_column() -> Mapped[int]:
    """`tenant_id` of a table that reaches the tenant through its agent's key alone."""
    return mapped_column(BigInteger)


def agent_column() -> Mapped[int]:
    """`agent_id`; its foreign key is `owned_by`'s, with the tenant (migration 0017)."""
    return mapped_column(BigInteger)


def owned_by(table: str, column: str, target: str) -> ForeignKeyConstraint:
    """The key of a member's row to its owner, tenant first (migration 0017): deleting the
    owner deletes the row. Named as the database has named it since before 0017."""
    return ForeignKeyConstraint(
        ["tenant_id", column],
        [f"{target}.tenant_id", f"{target}.id"],
        ondelete="CASCADE",
        name=f"{table}_{column}_fkey",
    )


def by_id(table: str) -> Index:
    """Rows found by `id` alone (ids are unique across tenants; the key is (tenant_id, id))."""
    return Index(f"{table}_id", "id")


ZERO = sql("0")
