"""The pages of a community's admins: members, usage, settings and the audit log.

    GET  /admin            every member with messages, passages, last active, tokens
    GET  /admin/usage      tokens per day, as a chart and a table
    GET  /admin/companion  the community's companion: name, instructions, new members'
                           persona (POST: save, audited; existing personas kept or replaced)
    GET  /admin/reach      where it answers (channels, DMs) and who is blocked (POST: save,
                           block, unblock; audited)
    GET  /admin/settings   welcome and opener settings (POST: save, audited), and the
                           community's own limits (POST /admin/limits: within the
                           operator's ceilings, audited)
    GET  /admin/audit      the audit log

A member's own pages (`bot.web.member`) open for admins too, from the member list.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from aiohttp import web

from adapters.common import WELCOME_EVENT
from bot.web.auth import see_other
from bot.web.boundary import given
from bot.web.render import Templates, admin_tabs, usage_chart
from core.companion import INSTRUCTIONS_LIMIT, NAME_LIMIT, CompanionProfile, channel_ids
from core.errors import BadSetting
from core.members.admission import REACH_TTL
from core.members.community import WELCOME_TEXT_LIMIT, Community
from core.members.service import Members
from core.tenants.access import Viewer

AUDIT_ROWS = 200
REACH_NOTICES = (
    "Saved; every message from now on follows it.",
    "Blocked: the companion stops answering them; they are told once.",
    "Unblocked: the companion answers them again.",
)
USAGE_DAYS = 30


def _unless_default(persona: str, default: str) -> str:
    """The form shows the built-in persona when none is set: sent back as is, it is none."""
    tidy = persona.replace("\r\n", "\n").strip()
    return "" if tidy == default else tidy


class AdminPages:
    def __init__(self, community: Community, members: Members, templates: Templates) -> None:
        self.community = community
        self.members = members
        self.templates = templates

    def _page(
        self, viewer: Viewer, tab: str, title: str, template: str, status: int = 200, **extra: Any
    ) -> web.Response:
        return self.templates.page(
            template, status, title=title, viewer=viewer, tabs=admin_tabs(tab), **extra
        )

    async def roster(
        self, request: web.Request, viewer: Viewer, form: Mapping[str, str]
    ) -> web.Response:
        roster = await self.community.roster(viewer.tenant)
        return self._page(viewer, "members", "Members", "admin_members.html", roster=roster)

    async def usage(
        self, request: web.Request, viewer: Viewer, form: Mapping[str, str]
    ) -> web.Response:
        days = await self.community.usage(viewer.tenant, USAGE_DAYS)
        chart = usage_chart(days)
        return self._page(viewer, "usage", "Usage", "admin_usage.html", days=days, chart=chart)

    async def settings(
        self, request: web.Request, viewer: Viewer, form: Mapping[str, str]
    ) -> web.StreamResponse:
        error = None
        if request.method == "POST":
            try:
                await self.community.change_settings(viewer.tenant, viewer.actor, form)
                return see_other("/admin/settings?saved=1")
            except BadSetting as refused:
                error = f"Not saved: {refused}."
        return await self._settings_page(
            request, viewer, error, "Saved; every member's next opener is re-planned."
        )

    async def limits(
        self, request: web.Request, viewer: Viewer, form: Mapping[str, str]
    ) -> web.StreamResponse:
        try:
            await self.community.change_limits(viewer.tenant, viewer.actor, form)
            return see_other("/admin/settings?limits=1")
        except BadSetting as refused:
            error = f"Limits not saved: {refused}. Nothing was changed."
            return await self._settings_page(request, viewer, error, typed=form)

    async def _settings_page(
        self,
        request: web.Request,
        viewer: Viewer,
        error: str | None,
        saved: str = "",
        typed: Mapping[str, str] | None = None,
    ) -> web.Response:
        notice = None
        if given(request).query.get("saved"):
            notice = saved
        elif given(request).query.get("limits"):
            notice = "Limits saved; they apply from the next message."
        return self._page(
            viewer,
            "settings",
            "Community settings",
            "admin_settings.html",
            400 if error else 200,
            s=await self.community.settings(viewer.tenant),
            limits=await self.community.limits(viewer.tenant),
            typed=typed,
            welcome_event=WELCOME_EVENT.format(name="<their name>"),
            welcome_limit=WELCOME_TEXT_LIMIT,
            error=error,
            notice=None if error else notice,
        )

    async def companion(
        self, request: web.Request, viewer: Viewer, form: Mapping[str, str]
    ) -> web.StreamResponse:
        profiles, error = self.members.profiles, None
        if request.method == "POST":
            try:
                _, replaced = await profiles.change(
                    viewer.tenant,
                    viewer.actor,
                    name=form.get("name", ""),
                    persona=_unless_default(
                        form.get("persona", ""), self.members.config.default_persona
                    ),
                    instructions=form.get("instructions", ""),
                    replace_personas=form.get("existing") == "replace",
                )
                return see_other(f"/admin/companion?saved={replaced}")
            except BadSetting as refused:
                error = f"Not saved: {refused}. Nothing was changed."
        profile, agents = await profiles.get(viewer.tenant)
        if error:  # what the admin typed stays in the boxes
            profile = CompanionProfile(
                form.get("name", ""), form.get("persona", ""), form.get("instructions", "")
            )
        saved = given(request).query.get("saved")
        notice = None
        if saved is not None and not error:
            notice = "Saved; every member's next answer uses it."
            if saved.isdigit() and int(saved):
                notice += f" The persona of {saved} members was replaced."
        config = self.members.config
        return self._page(
            viewer,
            "companion",
            "Your companion",
            "admin_companion.html",
            400 if error else 200,
            p=profile,
            agents=agents,
            default_persona=config.default_persona,
            limits={
                "name": NAME_LIMIT,
                "persona": config.persona_limit,
                "instructions": INSTRUCTIONS_LIMIT,
            },
            error=error,
            notice=notice,
        )

    async def reach(
        self, request: web.Request, viewer: Viewer, form: Mapping[str, str]
    ) -> web.StreamResponse:
        admission, error = self.members.admission, None
        if request.method == "POST":
            try:
                notice = await self._change_reach(viewer, form)
                return see_other(f"/admin/reach?saved={quote(notice)}")
            except BadSetting as refused:
                error = f"Not saved: {refused}. Nothing was changed."
        saved = given(request).query.get("saved")
        return self._page(
            viewer,
            "reach",
            "Where & who",
            "admin_reach.html",
            400 if error else 200,
            r=await admission.reach(viewer.tenant),
            blocked=await admission.blocked(viewer.tenant),
            ttl=int(REACH_TTL),
            typed=form if error and form.get("form") == "where" else None,
            error=error,
            notice=saved if saved in REACH_NOTICES else None,
        )

    async def _change_reach(self, viewer: Viewer, form: Mapping[str, str]) -> str:
        """What the form asked, done; the notice to show (one of REACH_NOTICES)."""
        admission, what = self.members.admission, form.get("form")
        if what in ("block", "unblock"):
            user = form.get("user", "").strip()
            if not user or len(user) > 64 or not user.replace("-", "").isalnum():
                raise BadSetting("type the member's platform user id, e.g. U0123ABCD")
            await admission.block(viewer.tenant, viewer.actor, user, what == "block")
            return REACH_NOTICES[1 if what == "block" else 2]
        dms = form.get("dms", "")
        if dms not in ("on", "off"):
            raise BadSetting("direct messages must be on or off")
        opened = channel_ids(form.get("open", ""))
        if len(opened) > 1:
            raise BadSetting("only one channel can have every message for it")
        await admission.change_reach(
            viewer.tenant,
            viewer.actor,
            channels=channel_ids(form.get("channels", "")),
            never=channel_ids(form.get("never", "")),
            open_channel=opened[0] if opened else "",
            dms=dms == "on",
        )
        return REACH_NOTICES[0]

    async def audit(
        self, request: web.Request, viewer: Viewer, form: Mapping[str, str]
    ) -> web.Response:
        entries = await self.members.audit_log(viewer.tenant, AUDIT_ROWS)
        return self._page(viewer, "audit", "Audit log", "admin_audit.html", entries=entries)

    def routes(self, admin_page: Any) -> list[web.RouteDef]:
        return [
            web.get("/admin", admin_page(self.roster)),
            web.get("/admin/companion", admin_page(self.companion)),
            web.post("/admin/companion", admin_page(self.companion)),
            web.get("/admin/reach", admin_page(self.reach)),
            web.post("/admin/reach", admin_page(self.reach)),
            web.get("/admin/usage", admin_page(self.usage)),
            web.get("/admin/settings", admin_page(self.settings)),
            web.post("/admin/settings", admin_page(self.settings)),
            web.post("/admin/limits", admin_page(self.limits)),
            web.get("/admin/audit", admin_page(self.audit)),
        ]
