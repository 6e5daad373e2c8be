"""The pages of one member's memory, for the member and for their community's admins.

    GET  /members/{user}                       working context, each block editable
    POST /members/{user}/blocks/{label}        save a block (the model's limit; not if stale)
    GET  /members/{user}/conversation          the latest messages, ?before= earlier, ?q= search
    GET  /members/{user}/passages              archival passages with their source
    POST /members/{user}/passages/{id}/delete  delete one
    GET  /members/{user}/settings              the next opener and why; settings (POST: save)
    GET  /members/{user}/data                  export and erase
    POST /members/{user}/export                the whole memory as a JSON download
    GET|POST /members/{user}/forget            the member erases everything (confirmed first)
    GET|POST /members/{user}/reset             an admin resets the member (confirmed first)

`auth.Doors.member_page` has checked who may open these before any handler runs; the
handlers pass `Visit.actor` down, so the services audit what an admin does.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any
from zoneinfo import available_timezones

from aiohttp import web

from adapters.common import NOTHING_YET, export_bytes
from bot.web.auth import COOKIE, Visit, see_other
from bot.web.boundary import BIGINT, given
from bot.web.render import Templates, admin_tabs, member_tabs
from core.errors import BadSetting, BlockRefused
from core.members.service import Members
from core.tenants.access import Access

NOT_FOUND = "There is no such page here."


@dataclass(frozen=True)
class BlockForm:
    label: str
    text: str  # what the box shows: the block, or the person's refused text
    expected: str  # the block's text when the page was made (to notice concurrent edits)
    length: int
    limit: int
    error: str | None = None


@cache
def _zones() -> list[str]:
    return sorted(available_timezones())


class MemberPages:
    def __init__(self, members: Members, access: Access, templates: Templates) -> None:
        self.members = members
        self.access = access
        self.templates = templates

    async def _page(
        self, visit: Visit, tab: str, title: str, template: str, status: int = 200, **extra: Any
    ) -> web.Response:
        profile = await self.members.profile(visit.viewer.tenant, visit.member)
        own = visit.actor is None
        if profile is None and not own:  # not a member of the admin's tenant
            return await self.missing(visit)
        name, zone = profile if profile else (None, "UTC")
        who = name or visit.member
        tabs = member_tabs(visit.base, tab)
        return self.templates.page(
            template,
            status,
            title=title if own else f"{title}: {who}",
            viewer=visit.viewer,
            tabs=tabs if own else admin_tabs("members"),
            subtabs=[] if own else tabs,
            who=who,
            own=own,
            base=visit.base,
            zone=zone,
            member_name="You" if own else who,
            **extra,
        )

    async def memory(
        self, request: web.Request, visit: Visit, refused: BlockForm | None = None
    ) -> web.Response:
        view = await self.members.view(visit.viewer.tenant, visit.member, visit.actor)
        blocks = []
        for label, value, limit in view.blocks if view else []:
            if refused and refused.label == label:
                blocks.append(
                    BlockForm(label, refused.text, value, len(value), limit, refused.error)
                )
            else:
                blocks.append(BlockForm(label, value, value, len(value), limit))
        query = given(request).query
        saved = query.get("saved")  # the label of a block shown here, never other words
        shown = {block.label for block in blocks}
        notice = f"Saved the {saved} block." if saved and saved in shown else None
        if query.get("reset"):
            notice = "Done: this member's memory is erased; they start afresh."
        return await self._page(
            visit,
            "memory",
            "Working context",
            "memory.html",
            400 if refused else 200,
            view=view,
            blocks=blocks,
            notice=notice,
            nothing_yet=NOTHING_YET if visit.actor is None else "No memory of this member yet.",
        )

    async def save_block(self, request: web.Request, visit: Visit) -> web.StreamResponse:
        label = given(request).path("label")
        if label is None:
            return await self.missing(visit)
        value = visit.form.get("value", "")
        try:
            await self.members.edit_block(
                visit.viewer.tenant,
                visit.member,
                label,
                value,
                expected=visit.form.get("expected"),
                actor=visit.actor,
            )
        except BlockRefused as error:
            refused = BlockForm(label, value, "", 0, 0, str(error))
            return await self.memory(request, visit, refused)
        return see_other(f"{visit.base}?saved={label}")

    async def conversation(self, request: web.Request, visit: Visit) -> web.Response:
        tenant, member, actor = visit.viewer.tenant, visit.member, visit.actor
        given_ = given(request)
        query = given_.query.get("q", "").strip()[:200]
        before = given_.number(given_.query.get("before"), 0, high=BIGINT) or None
        found = conversation = None
        if query:
            page = given_.number(given_.query.get("page"), 1)
            found = await self.members.search(tenant, member, query, page, actor)
        else:
            conversation = await self.members.conversation(tenant, member, before, actor)
        return await self._page(
            visit,
            "conversation",
            "Conversation",
            "conversation.html",
            query=query,
            found=found,
            conversation=conversation,
            before=before,
        )

    async def passages(self, request: web.Request, visit: Visit) -> web.Response:
        given_ = given(request)
        page = given_.number(given_.query.get("page"), 1)
        found = await self.members.passages(visit.viewer.tenant, visit.member, page, visit.actor)
        notice = "Deleted the passage." if given_.query.get("deleted") else None
        return await self._page(
            visit, "passages", "Archival memory", "passages.html", passages=found, notice=notice
        )

    async def delete_passage(self, request: web.Request, visit: Visit) -> web.StreamResponse:
        given_ = given(request)
        passage = given_.number(given_.path("passage"), 0, high=BIGINT)
        deleted = passage > 0 and await self.members.delete_passage(
            visit.viewer.tenant, visit.member, passage, visit.actor
        )
        if not deleted:
            return await self.missing(visit)
        page = given_.number(visit.form.get("page"), 1)
        return see_other(f"{visit.base}/passages?page={page}&deleted=1")

    async def settings(
        self, request: web.Request, visit: Visit, error: str | None = None
    ) -> web.Response:
        tenant, member = visit.viewer.tenant, visit.member
        status = await self.members.opener_status(tenant, member, visit.actor)
        view = await self.members.view(tenant, member)  # the settings, not audited again
        chosen = view.settings if view else {}
        quiet = visit.form.get("quiet_hours") or chosen.get("quiet_hours") or "22:00-09:00"
        return await self._page(
            visit,
            "settings",
            "Openers & settings",
            "settings.html",
            400 if error else 200,
            opener=status,
            openers=chosen.get("openers") is not False,
            quiet_hours=quiet,
            zones=_zones() if visit.actor is None else [],
            zone_choice=visit.form.get("timezone") or (view.timezone if view else "UTC"),
            error=error,
            notice="Saved your settings." if given(request).query.get("saved") else None,
        )

    async def save_settings(self, request: web.Request, visit: Visit) -> web.StreamResponse:
        if visit.actor is not None:
            return await self.refuse(visit, "Only the member can change their own settings.")
        form = visit.form
        try:
            await self.members.settings(
                visit.viewer.tenant,
                visit.member,
                openers=form.get("openers") != "off",
                quiet_hours=form.get("quiet_hours", ""),
                timezone=form.get("timezone", ""),
            )
        except BadSetting as error:
            return await self.settings(request, visit, f"Not saved: {error}.")
        return see_other(f"{visit.base}/settings?saved=1")

    async def data(self, request: web.Request, visit: Visit) -> web.Response:
        return await self._page(visit, "data", "Export & erase", "data.html")

    async def export(self, request: web.Request, visit: Visit) -> web.StreamResponse:
        tenant, member = visit.viewer.tenant, visit.member
        if visit.actor is None:
            doc = await self.members.export(tenant, member)
        else:
            doc = await self.members.admin_export(tenant, visit.actor, member)
        if doc is None:
            return await self.missing(visit)
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in member)[:60]
        return web.Response(
            body=export_bytes(doc),
            content_type="application/json",
            headers={"Content-Disposition": f'attachment; filename="memory-{safe}.json"'},
        )

    async def forget(self, request: web.Request, visit: Visit) -> web.StreamResponse:
        if visit.actor is not None:
            return await self.refuse(visit, "Only the member can erase their own memory.")
        if request.method == "GET":
            return await self._confirm(
                visit,
                "Forget me",
                "This erases everything your companion remembers about you, and your settings,"
                " for good. It cannot be undone. Are you sure?",
                "Yes, erase everything",
                "/forget",
            )
        await self.members.forget(visit.viewer.tenant, visit.member)  # signs them out too
        response = self.templates.page(
            "message.html",
            title="Erased",
            message="Done: everything your companion remembered about you is erased.",
            hint="You are signed out. If you talk to it again, it starts afresh.",
            back=None,
        )
        response.del_cookie(COOKIE, path="/")
        return response

    async def reset(self, request: web.Request, visit: Visit) -> web.StreamResponse:
        if visit.actor is None:
            return await self.refuse(visit, "Resetting is for admins; use Forget me instead.")
        if request.method == "GET":
            return await self._confirm(
                visit,
                "Reset",
                f"This erases the whole memory of {visit.member}, for good. Are you sure?",
                "Yes, reset this member",
                "/reset",
            )
        await self.members.admin_reset(visit.viewer.tenant, visit.actor, visit.member)
        return see_other(f"{visit.base}?reset=1")

    async def _confirm(
        self, visit: Visit, title: str, question: str, label: str, path: str
    ) -> web.Response:
        return await self._page(
            visit,
            "data",
            title,
            "confirm.html",
            question=question,
            confirm_label=label,
            action=visit.base + path,
            cancel=visit.base + "/data",
        )

    async def refuse(self, visit: Visit, message: str) -> web.Response:
        return self.templates.page(
            "message.html",
            403,
            title="Not allowed",
            viewer=visit.viewer,
            message=message,
            hint=None,
            back=visit.base,
            back_label="Back",
        )

    async def missing(self, visit: Visit) -> web.Response:
        return self.templates.page(
            "message.html",
            404,
            title="Not found",
            viewer=visit.viewer,
            message=NOT_FOUND,
            hint=None,
            back=visit.base,
            back_label="Back",
        )

    def routes(self, member_page: Any) -> list[web.RouteDef]:
        base = "/members/{user}"
        return [
            web.get(base, member_page(self.memory)),
            web.post(base + "/blocks/{label}", member_page(self.save_block)),
            web.get(base + "/conversation", member_page(self.conversation)),
            web.get(base + "/passages", member_page(self.passages)),
            web.post(base + "/passages/{passage}/delete", member_page(self.delete_passage)),
            web.get(base + "/settings", member_page(self.settings)),
            web.post(base + "/settings", member_page(self.save_settings)),
            web.get(base + "/data", member_page(self.data)),
            web.post(base + "/export", member_page(self.export)),
            web.get(base + "/forget", member_page(self.forget)),
            web.post(base + "/forget", member_page(self.forget)),
            web.get(base + "/reset", member_page(self.reset)),
            web.post(base + "/reset", member_page(self.reset)),
        ]
