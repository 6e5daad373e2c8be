"""An export is one moment of the member's memory: a turn that commits while the export
reads is in it whole or not at all, so no message falls between two of its queries."""

from sqlalchemy.ext.asyncio import AsyncSession

from core.events import EventKind, InboundEvent
from core.models import Passage
from tests.fake_openai import say


async def test_a_turn_committing_during_an_export_loses_no_message(
    engine, members, fake, monkeypatch
):
    fake.brain = lambda body: say("noted")
    scope = await engine.agent("club", "ana")
    await engine.submit(scope, InboundEvent(EventKind.USER_MESSAGE, "my locker code is 4711"))
    scalars, raced = AsyncSession.scalars, []

    async def turn_between_queries(self, statement, *args, **kwargs):
        # Messages and summaries are read; before passages and pending events are, the
        # member's pending message is answered and committed by another connection.
        if not raced and Passage.__table__ in statement.get_final_froms():
            raced.append(True)
            handled = await engine.drain(scope)
            assert [result.event_id for result in handled]
        return await scalars(self, statement, *args, **kwargs)

    monkeypatch.setattr(AsyncSession, "scalars", turn_between_queries)
    doc = await members.export("club", "ana")
    monkeypatch.undo()
    assert raced
    said = [m["content"] for m in doc["messages"]] + [
        e["payload"]["text"] for e in doc["pending_events"]
    ]
    # Was: in neither (read as a message before it was stored, as a pending event after it
    # was answered).
    assert any("4711" in (text or "") for text in said), doc
    after = await members.export("club", "ana")
    assert any("4711" in (m["content"] or "") for m in after["messages"])
    assert after["pending_events"] == []


async def test_an_export_carries_the_members_settings_and_schedule(engine, members, fake):
    """DESIGN 6: an export holds the member's schedule and settings, not only memory.
    Found (rights8): it had neither (the time zone alone)."""
    fake.brain = lambda body: say("noted")
    await engine.converse(
        await engine.agent("club", "bo"), InboundEvent(EventKind.USER_MESSAGE, "hi")
    )
    await members.settings("club", "bo", openers=False, quiet_hours="23:00-08:00")
    doc = await members.export("club", "bo")
    assert doc["settings"]["openers"] is False
    assert doc["settings"]["quiet_hours"] == "23:00-08:00"
    assert "next_opener_at" in doc and doc["next_opener_at"] is None  # opted out: none
    await members.settings("club", "bo", openers=True)
    assert (await members.export("club", "bo"))["next_opener_at"] is not None
