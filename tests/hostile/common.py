"""What every hostile case checks, and the names the hostile test modules share.

Each case uses a member of its own on the module's one schema, engine, Slack app and Discord
client (tests/hostile/conftest.py). A case that fails because the product is wrong stays in
the corpus, marked `xbug(<the exception the bug raises>, "<what is wrong>")`: a strict xfail
that fails again as soon as the case breaks for any other reason.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import func, select

import adapters.slack.posting as slack_posting
from adapters.common import SORRY
from core.config import EngineConfig
from core.models import Agent, AuditEntry, Message, Tenant, User
from core.runtime.apologies import INTERNAL_ERROR_REPLY
from core.scope import Scope
from tests.fake_discord import snowflake, user
from tests.fake_openai import FakeOpenAI, count_prompt
from tests.fake_slack import TEAM
from tests.rigs import DiscordRig, SlackRig

CONFIG = EngineConfig(rate_limit=None)
WINDOW = CONFIG.context_window
SLACK_LIMIT = slack_posting.SLACK_TEXT_LIMIT
SLACK_TENANT = f"slack:{TEAM}"
GUILD = 1_200_000_000_000_000_001
GENERAL = 1_200_000_000_000_000_002
BOT_ID = 1_200_000_000_000_000_010
APP_ID = 1_200_000_000_000_000_011
BOT_ROLE = 1_200_000_000_000_000_012
MOD = 1_200_000_000_000_000_022
OPERATOR = 1_200_000_000_000_000_023
DISCORD_TENANT = f"discord:{GUILD}"
BOT = user(BOT_ID, "Companion", bot=True)
_ids = itertools.count(1)

Bug = tuple[type[BaseException], str]  # (what the failing case raises, what is wrong)


def xbug(raises: type[BaseException], reason: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, raises=raises, reason=f"BUG: {reason}")


def bug_marks(bugs: dict[str, Bug], name: str) -> list[pytest.MarkDecorator]:
    return [xbug(*bugs[name])] if name in bugs else []


def case(value: Any, *marks: pytest.MarkDecorator, id: str) -> Any:
    return pytest.param(value, marks=marks, id=id)


def next_id() -> int:
    """A number no other case of this run has used (for channel, file and call ids)."""
    return next(_ids)


def uid(prefix: str = "u") -> str:
    return f"{prefix}{os.getpid()}x{next(_ids)}"


def slack_uid() -> str:
    return f"U{os.getpid() % 1000:03d}X{next(_ids):05d}"


def name_of(user_id: int) -> str:
    """Every hostile member's display name (none of the cases depends on it)."""
    return f"Member{user_id % 1000}"


# --- what every case checks ------------------------------------------------------------------

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def fences_balanced(part: str) -> bool:
    """Whether every fenced code block opened in `part` is closed in it (CommonMark rules;
    a bare run of more than 20 backticks or tildes is noise, not a fence)."""
    opened: str | None = None
    for line in part.split("\n"):
        match = _FENCE.match(line)
        if not match:
            continue
        run, info = match.group(1), match.group(2)
        if len(run) > 20 and not info.strip():
            continue
        if opened is None:
            if run[0] == "`" and "`" in info:
                continue  # inline code, not a fence
            opened = run
        elif run[0] == opened[0] and len(run) >= len(opened) and not info.strip():
            opened = None
    return opened is None


def squash(text: str) -> str:
    """The words of a text without fences and white space: what splitting must keep."""
    lines = [line for line in text.split("\n") if not _FENCE.match(line)]
    return "".join("".join(lines).split())


def assert_clear(reply: str) -> None:
    """A reply a person can read: words, not silence, not the engine's own failure, not the
    prompt's internals."""
    assert isinstance(reply, str) and reply.strip(), f"empty reply {reply!r}"
    assert reply not in (INTERNAL_ERROR_REPLY, SORRY), reply
    assert re.search(r"[A-Za-z]{2,}", reply), f"no words in {reply[:200]!r}"
    assert not re.search(r"system alert|tokens in use", reply, re.I), f"internals: {reply[:200]!r}"


def assert_one_line(answer: str) -> None:
    assert answer.strip() and "\n" not in answer.strip(), f"want one line: {answer!r}"
    assert "Traceback" not in answer


def assert_parts(parts: list[str], limit: int, whole: str | None = None) -> None:
    assert parts, "nothing was sent"
    for part in parts:
        assert part.strip(), "an empty part was sent"
        assert len(part) <= limit, f"a part of {len(part)} characters (limit {limit})"
    if whole is not None and fences_balanced(whole):
        odd = [i for i, p in enumerate(parts) if not fences_balanced(p)]
        assert not odd, f"parts {odd} of {len(parts)} open a code block they do not close"
    if whole is not None:
        assert squash("\n".join(parts)) == squash(whole), "text was lost or changed in splitting"


def assert_prompts_fit(fake: FakeOpenAI, window: int = WINDOW) -> None:
    for body in fake.chat_requests:
        assert count_prompt(body) <= window, f"prompt of {count_prompt(body)} > window {window}"


async def rows(sessions, model_cls: Any, scope: Scope) -> list[Any]:
    async with sessions() as session:
        found = await session.scalars(
            select(model_cls)
            .where(model_cls.tenant_id == scope.tenant_id, model_cls.agent_id == scope.agent_id)
            .order_by(model_cls.id)
        )
        return list(found)


async def said(sessions, scope: Scope) -> list[str]:
    """The member's own messages in recall storage."""
    return [m.content for m in await rows(sessions, Message, scope) if m.role == "user"]


async def scope_of(sessions, tenant: str, user_id: str) -> Scope | None:
    async with sessions() as session:
        row = (
            await session.execute(
                select(Agent.tenant_id, Agent.id)
                .join(User, User.id == Agent.user_id)
                .join(Tenant, Tenant.id == User.tenant_id)
                .where(Tenant.key == tenant, User.external_id == user_id)
            )
        ).first()
    return Scope(row[0], row[1]) if row else None


async def audit_count(sessions) -> int:
    async with sessions() as session:
        return int(await session.scalar(select(func.count()).select_from(AuditEntry)) or 0)


async def user_count(sessions) -> int:
    async with sessions() as session:
        return int(await session.scalar(select(func.count()).select_from(User)) or 0)


# --- through the platforms -------------------------------------------------------------------


async def slack_dispatch(rig: SlackRig, payload: dict[str, Any]) -> tuple[int, list[dict]]:
    """(HTTP status, the chat.postMessage calls it made)."""
    before = len(rig.api.calls)
    response = await rig.dispatch(payload)
    posts = [args for name, args in rig.api.calls[before:] if name == "chat.postMessage"]
    return response.status, posts


def slack_texts(posts: list[dict[str, Any]]) -> list[str]:
    for post in posts:
        blocks = post.get("blocks")
        blocks = json.loads(blocks) if isinstance(blocks, str) else blocks or []
        for block in blocks:
            assert len(block["text"]["text"]) <= SLACK_LIMIT
    return [post["text"] for post in posts]


@dataclass
class Posted:
    author: int
    channel: int
    payload: dict[str, Any]
    sent: list[Any] = field(default_factory=list)  # the POST .../messages calls made

    @property
    def texts(self) -> list[str]:
        return [c.body["content"] for c in self.sent]


async def discord_post(
    rig: DiscordRig,
    content: str,
    *,
    in_guild: bool = False,
    attachments: list[dict[str, Any]] | None = None,
    mentions: list[dict[str, Any]] | None = None,
) -> Posted:
    """A new member posts `content` in a DM (or, with `in_guild`, in the server's channel)."""
    author = snowflake()
    before = len(rig.api.calls)
    if in_guild:
        channel = GENERAL
        payload = await rig.say(
            author,
            content,
            channel,
            mentions=[BOT] if mentions is None else mentions,
            attachments=attachments,
        )
    else:
        channel = snowflake()
        payload = await rig.say(author, content, channel, dm=True, attachments=attachments)
    sent = [
        c
        for c in rig.api.calls[before:]
        if c.method == "POST" and c.path == f"/channels/{channel}/messages"
    ]
    return Posted(author, channel, payload, sent)
