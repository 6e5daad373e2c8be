"""One engine, Slack app and Discord client per hostile module, on conftest's module_* fixtures.

Each case uses a member of its own, so sharing them is safe and keeps hundreds of cases fast;
`fresh_model` gives every case the default brain and no queued failures.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from adapters.common import Services
from core.runtime.engine import Engine
from tests.fake_discord import guild, member, role, text_channel
from tests.fake_openai import FakeOpenAI, default_brain
from tests.hostile.common import (
    APP_ID,
    BOT,
    BOT_ID,
    BOT_ROLE,
    CONFIG,
    GENERAL,
    GUILD,
    MOD,
    OPERATOR,
    name_of,
)
from tests.rigs import discord_rig, slack_rig


@pytest.fixture(scope="module")
def engines(module_engine_for) -> Callable[[], Engine]:
    """A fresh engine on the module's schema, for a case that may skew its token counter."""
    return lambda: module_engine_for(CONFIG, timeout=20.0)


@pytest.fixture(scope="module")
def eng(engines) -> Engine:
    """The engine the module's cases share."""
    return engines()


@pytest.fixture(scope="module")
async def slack(eng, module_members):
    async with slack_rig(
        Services(eng, module_members, frozenset({"UOPS"})), admins=("UADMIN",)
    ) as rig:
        yield rig


@pytest.fixture(scope="module")
async def dc(eng, module_members):
    people = [member(BOT_ID, "Companion", roles=[BOT_ROLE]), member(MOD, "Mo")]
    people[0]["user"]["bot"] = True
    server = guild(
        GUILD,
        MOD,
        [text_channel(GENERAL, GUILD, "general")],
        [],
        people,
        [role(BOT_ROLE, "Companion", bot_id=BOT_ID)],
    )
    services = Services(eng, module_members, admin_ids=frozenset({str(OPERATOR)}))
    async with discord_rig(
        services, bot=BOT, app_id=APP_ID, server=server, channel_id=GENERAL, names=name_of
    ) as rig:
        yield rig


@pytest.fixture(autouse=True)
def fresh_model(module_fake: FakeOpenAI) -> None:
    module_fake.brain = default_brain
    module_fake.requests.clear()
    module_fake.failures.clear()
    module_fake.delay = 0.0
    module_fake.inflation = 1.0
