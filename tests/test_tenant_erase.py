"""`companion tenant erase`: a whole community's memory, at once, confirmed and audited."""

from __future__ import annotations

import asyncio

from sqlalchemy import select, text

from core.models import AuditEntry, Tenant
from tests.conftest import cli_env, run_cli


async def chat(env: dict, tenant: str, user: str, *lines: str) -> None:
    run = await run_cli(env, "chat", "--tenant", tenant, "--user", user, stdin="\n".join(lines))
    assert run.code == 0, run


async def rows(sessions, tenant: str) -> int:
    """Messages stored for the members of `tenant`."""
    async with sessions() as session:
        found = await session.scalar(
            text(
                "SELECT count(*) FROM messages m JOIN tenants t ON t.id = m.tenant_id "
                "WHERE t.key = :tenant"
            ),
            {"tenant": tenant},
        )
        return int(found or 0)


async def test_erase_asks_first_then_erases_one_community_and_says_so(
    fake, pg_url, schema, sessions
):
    env = cli_env(fake, pg_url, schema)
    await asyncio.gather(
        chat(env, "slack:T9", "U1", "remember that my cat is called Miso"),
        chat(env, "slack:T9", "U2", "hello"),
        chat(env, "slack:T8", "U1", "I live next door"),
    )
    other = await rows(sessions, "slack:T8")

    refused = await run_cli(env, "tenant", "erase", "slack:T9", stdin="yes\n")
    assert refused.code == 2 and "--yes" in refused.err  # no terminal: no confirmation
    assert await rows(sessions, "slack:T9") > 0

    done = await run_cli(env, "tenant", "erase", "slack:T9", "--yes")
    assert done.code == 0, done
    assert "erased all memory of 2 members of slack:T9" in done.err
    assert await rows(sessions, "slack:T9") == 0
    assert await rows(sessions, "slack:T8") == other  # the neighbour keeps everything
    async with sessions() as session:
        entry = await session.scalar(
            select(AuditEntry)
            .join(Tenant, Tenant.id == AuditEntry.tenant_id)
            .where(Tenant.key == "slack:T9", AuditEntry.action == "erase tenant")
        )
    assert entry is not None and entry.actor.startswith("operator ")
    assert entry.detail == {"members": 2}

    member = await run_cli(env, "export", "--tenant", "slack:T9", "--user", "U1")
    assert member.code == 2 and "no agent" in member.err


async def test_erasing_an_unknown_community_changes_nothing(fake, pg_url, schema):
    env = cli_env(fake, pg_url, schema)
    run = await run_cli(env, "tenant", "erase", "slack:TNOPE", "--yes")
    assert run.code == 0 and "nothing to erase" in run.err
