"""The /companion slash command, its confirmation buttons, and the App Home tab.

    /companion memory | export | forget | openers on|off | quiet 22:00-09:00
               | timezone Europe/Berlin | web | help
    /companion admin export @member | admin reset @member | admin welcome on|off | admin web
    /companion admin companion | admin name|instructions|persona <text> (- for the default)
    /companion admin channel #channel answer|never|open|default | admin dms on|off
    /companion admin block | unblock @member
    /companion admin limits | admin limit <what> <N> (- for none) | admin welcome-text <text>

Answers are ephemeral. Exports arrive as a JSON file in a DM. Erasing asks first, with a
button only the person who asked can press. Admin means workspace admin or owner (asked
from Slack, never taken from the payload) or a user id in COMPANION_ADMIN_IDS.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.common import (
    FORGET_ASK,
    FORGET_DONE,
    HELP,
    LIMIT_NAMES,
    NOT_ADMIN,
    Services,
    block_member,
    change_companion,
    companion_text,
    export_bytes,
    limits_text,
    memory_text,
    place_channel,
    reach_text,
    set_limits,
    set_welcome_text,
)
from adapters.slack.events import tenant_key
from adapters.slack.later import after_ack
from adapters.text import to_slack_mrkdwn
from core.errors import BadSetting, NotInstalled

FORGET = "companion_forget_confirm"
RESET = "companion_admin_reset_confirm"
MENTION = re.compile(r"<@([A-Z0-9]+)(?:\|[^>]*)?>")
CHANNEL = re.compile(r"<#([A-Z0-9]+)(?:\|([^>]*))?>")


async def is_admin(services: Services, client: AsyncWebClient, user: str) -> bool:
    return bool(await admin_now(services, client, user))  # when in doubt, not an admin


async def admin_now(services: Services, client: AsyncWebClient, user: str) -> bool | None:
    """Workspace admin or owner (or a configured admin id); None when Slack cannot say."""
    if user in services.admin_ids:
        return True
    try:
        info = await client.users_info(user=user)
    except SlackApiError as error:
        return False if error.response.get("error") == "user_not_found" else None
    profile = info.get("user") or {}
    if profile.get("deleted"):
        return False
    return bool(profile.get("is_admin") or profile.get("is_owner"))


def admin_rights(services: Services, clients: Callable[[str], Awaitable[AsyncWebClient]]) -> Any:
    """The inspector's re-check of an admin session: (tenant, user) -> admin now?"""

    async def check(tenant: str, user: str) -> bool | None:
        try:
            client = await clients(tenant)
        except NotInstalled:
            return False  # the workspace removed the app: nobody administers it here
        return await admin_now(services, client, user)

    return check


def confirm_blocks(question: str, action: str, value: str, label: str) -> list[dict[str, Any]]:
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": question}},
        {
            "type": "actions",
            "elements": [
                {
                    "type": "button",
                    "text": {"type": "plain_text", "text": label},
                    "style": "danger",
                    "action_id": action,
                    "value": value,
                }
            ],
        },
    ]


async def send_file(client: AsyncWebClient, user: str, name: str, data: bytes, note: str) -> None:
    dm = await client.conversations_open(users=user)
    await client.files_upload_v2(
        channel=dm["channel"]["id"], filename=name, content=data, initial_comment=note
    )


ADMIN_USAGE = (
    "Usage: /companion admin export @member | reset @member | welcome on|off | web | "
    "companion | name <name> | instructions <text> | persona <text> (- for the default) | "
    "channel #channel answer|never|open|default | dms on|off | block @member | unblock @member | "
    "limits | limit messages|member-tokens|community-tokens|member-dollars|community-dollars N | "
    "welcome-text <text>"
)


async def _admin(
    services: Services,
    client: AsyncWebClient,
    tenant: str,
    actor: str,
    text: str,
    respond: Any,
) -> None:
    """`text`: what follows `admin`, as typed (instructions keep their lines)."""
    if not await is_admin(services, client, actor):
        await respond(NOT_ADMIN)
        return
    words = text.split()
    action = words[0].lower() if words else ""
    if action == "companion":
        await respond(to_slack_mrkdwn(await companion_text(services.members, tenant)))
        return
    channel = CHANNEL.fullmatch(words[1]) if len(words) == 3 else None
    if action == "channel" and channel is not None:
        name = f"#{channel.group(2)}" if channel.group(2) else f"<#{channel.group(1)}>"
        said = await place_channel(
            services.members, tenant, actor, channel.group(1), name, words[2].lower()
        )
        await respond(said)
        return
    if action == "dms" and words[1:] in (["on"], ["off"]):
        reach = await services.members.admission.change_reach(tenant, actor, dms=words[1] == "on")
        await respond(reach_text(reach))
        return
    blocked = MENTION.fullmatch(words[1]) if len(words) == 2 else None
    if action in ("block", "unblock") and blocked is not None:
        who = blocked.group(1)
        said = await block_member(
            services.members, tenant, actor, who, f"<@{who}>", action == "block"
        )
        await respond(said)
        return
    if action == "limits":
        await respond(await limits_text(services.community, tenant))
        return
    if action == "limit" and len(words) == 3 and words[1].replace("-", "_") in LIMIT_NAMES:
        change = {words[1].replace("-", "_"): words[2]}
        await respond(await set_limits(services.community, tenant, actor, change))
        return
    if action == "welcome-text" and len(words) > 1:
        value = text.split(None, 1)[1]
        await respond(await set_welcome_text(services.members, tenant, actor, value))
        return
    if action in ("name", "instructions", "persona") and len(words) > 1:
        value = text.split(None, 1)[1]
        _, said = await change_companion(services.members, tenant, actor, {action: value})
        await respond(said)
        return
    if action == "web":
        await respond(await services.web_link(tenant, actor, admin=True), unfurl_links=False)
        return
    if action == "welcome" and len(words) > 1 and words[1] in ("on", "off"):
        await services.members.tenant_settings(tenant, actor=actor, welcome=words[1] == "on")
        await respond(f"Welcome messages are {words[1]}.")
        return
    target = MENTION.search(" ".join(words[1:]))
    if action not in ("export", "reset") or target is None:
        await respond(ADMIN_USAGE)
        return
    member = target.group(1)
    if action == "export":
        doc = await services.members.admin_export(tenant, actor, member)
        if doc is None:
            await respond(f"I have no memory of <@{member}>.")
            return
        await send_file(
            client,
            actor,
            f"companion-memory-{member}.json",
            export_bytes(doc),
            f"Memory export of <@{member}> (this action is in the audit log).",
        )
        await respond(f"Sent you the export of <@{member}> as a direct message.")
        return
    await respond(
        text=f"Erase all memory of <@{member}>?",
        blocks=confirm_blocks(
            f"Erase *all* memory of <@{member}>, for good?", RESET, member, "Yes, erase it"
        ),
    )


async def run_command(
    services: Services, client: AsyncWebClient, command: dict[str, Any], respond: Any
) -> None:
    tenant, user = tenant_key(command["team_id"]), command["user_id"]
    words = (command.get("text") or "").split()
    sub = words[0].lower() if words else "help"
    members = services.members
    try:
        if sub == "memory":
            await respond(to_slack_mrkdwn(memory_text(await members.view(tenant, user))))
        elif sub == "export":
            doc = await members.export(tenant, user)
            if doc is None:
                await respond(memory_text(None))
                return
            await send_file(
                client,
                user,
                "companion-memory.json",
                export_bytes(doc),
                "Everything I remember about you.",
            )
            await respond("Sent you your memory as a file in a direct message.")
        elif sub == "forget":
            await respond(
                text=FORGET_ASK, blocks=confirm_blocks(FORGET_ASK, FORGET, user, "Yes, forget me")
            )
        elif sub == "openers" and words[1:2] in (["on"], ["off"]):
            await members.settings(tenant, user, openers=words[1] == "on")
            await respond(
                f"Openers are {words[1]}: I {'may' if words[1] == 'on' else 'won’t'} "
                "start conversations with you."
            )
        elif sub == "quiet" and len(words) > 1:
            saved = await members.settings(tenant, user, quiet_hours=" ".join(words[1:]))
            await respond(f"Quiet hours set to {saved['quiet_hours']} ({saved['timezone']}).")
        elif sub == "timezone" and len(words) > 1:
            saved = await members.settings(tenant, user, timezone=words[1])
            await respond(f"Time zone set to {saved['timezone']}.")
        elif sub == "web":
            await respond(await services.web_link(tenant, user), unfurl_links=False)
        elif sub == "admin":
            rest = (command.get("text") or "").strip()[len(words[0]) :]
            await _admin(services, client, tenant, user, rest, respond)
        else:
            await respond(HELP.replace(" | ", "\n"))
    except BadSetting as error:
        await respond(str(error))


def register_commands(app: AsyncApp, services: Services) -> None:
    # Each listener acknowledges at once; the work runs after (Slack waits 3 s at most).

    @app.command("/companion")
    async def on_command(
        ack: Any, command: dict[str, Any], client: AsyncWebClient, respond: Any
    ) -> None:
        await ack()

        async def private(text: str = "", **fields: Any) -> None:
            await respond(text=text, response_type="ephemeral", **fields)

        after_ack(services, client, command, run_command(services, client, command, private))

    @app.action(FORGET)
    async def on_forget(
        ack: Any, body: dict[str, Any], client: AsyncWebClient, respond: Any
    ) -> None:
        await ack()
        after_ack(services, client, body, forget(services, body, respond))

    @app.action(RESET)
    async def on_reset(
        ack: Any, body: dict[str, Any], client: AsyncWebClient, respond: Any
    ) -> None:
        await ack()
        after_ack(services, client, body, reset(services, client, body, respond))

    @app.event("app_home_opened")
    async def on_home(event: dict[str, Any], body: dict[str, Any], client: AsyncWebClient) -> None:
        after_ack(services, client, body, show_home(services, client, body, event["user"]))


async def forget(services: Services, body: dict[str, Any], respond: Any) -> None:
    user, tenant = body["user"]["id"], tenant_key(body["team"]["id"])
    if body["actions"][0].get("value") != user:
        await respond(text="Only the person who asked can confirm this.", replace_original=False)
        return
    await services.members.forget(tenant, user)
    await respond(text=FORGET_DONE, replace_original=True)


async def reset(
    services: Services, client: AsyncWebClient, body: dict[str, Any], respond: Any
) -> None:
    actor, tenant = body["user"]["id"], tenant_key(body["team"]["id"])
    if not await is_admin(services, client, actor):
        await respond(text=NOT_ADMIN, replace_original=False)
        return
    member = body["actions"][0]["value"]
    found = await services.members.admin_reset(tenant, actor, member)
    done = "erased" if found else "already empty"
    await respond(text=f"Memory of <@{member}> {done}.", replace_original=True)


async def show_home(
    services: Services, client: AsyncWebClient, body: dict[str, Any], user: str
) -> None:
    """The App Home tab: what the agent remembers, and the commands."""
    view = await services.members.view(tenant_key(body["team_id"]), user)
    text = to_slack_mrkdwn(memory_text(view))
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": "What I remember"}},
        *(
            {"type": "section", "text": {"type": "mrkdwn", "text": part[:3000]}}
            for part in text.split("\n\n")
        ),
        {"type": "divider"},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": "/companion " + HELP}]},
    ]
    await client.views_publish(user_id=user, view={"type": "home", "blocks": blocks})
