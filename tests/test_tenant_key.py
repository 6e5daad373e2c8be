"""Tenant keys, built and read back in one place: `<platform>:<the platform's id>`."""

from adapters.discord.tenants import guild_of, tenant_key
from adapters.slack.events import tenant_key as slack_tenant
from bot.cli import TERMINAL_TENANT
from core.tenant_key import TenantKey


def test_a_key_reads_back_as_it_was_built():
    assert tenant_key(123) == "discord:123" and slack_tenant("T0123") == "slack:T0123"
    for text in ("discord:123", "slack:T0123", "slack:", "odd:with:colons"):
        assert str(TenantKey.parse(text)) == text
    assert TenantKey.parse("odd:with:colons") == TenantKey("odd", "with:colons")


def test_the_terminals_tenant_names_no_platform():
    key = TenantKey.parse(TERMINAL_TENANT)
    assert key.platform == "" and str(key) == TERMINAL_TENANT


def test_only_a_discord_key_names_a_server():
    assert guild_of("discord:42") == 42
    assert guild_of("slack:42") is None and guild_of(TERMINAL_TENANT) is None
    assert guild_of("discord:not-a-number") is None
