"""A big member imports fast and costs no summary calls afterwards.

Found: 20,000 messages took 230-266 s to import (one INSERT at a time), and the first turn
after it made about 100 model calls to summarise the imported history. Now messages go in
a thousand per INSERT with their words indexed once, and history that does not fit the
window goes out of view at import (searchable as ever), so the first turn is one call.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from core.events import EventKind, InboundEvent
from core.members.portability import parse_export
from tests.fake_openai import (
    calls,
    default_brain,
    is_summary_request,
    latest_results,
    say,
    tool_call,
)
from tests.test_functions import script

START = datetime(2024, 1, 1, tzinfo=UTC)


def big_export(count: int) -> dict:
    messages = []
    for n in range(count):
        role = "user" if n % 2 == 0 else "assistant"
        words = f"day {n}: my plant number {n} got water" if role == "user" else f"noted {n}"
        messages.append(
            {
                "role": role,
                "content": words,
                "created_at": (START + timedelta(minutes=n)).isoformat(),
                "in_context": True,  # as a careless exporter might say of everything
            }
        )
    messages[1000]["content"] = "my cat Biscuit-7731 sleeps on the radiator"
    return {
        "format": "companion-export",
        "version": 1,
        "display_name": "Ana",
        "blocks": [{"label": "human", "value": "Ana."}, {"label": "persona", "value": "Kind."}],
        "messages": messages,
        "passages": [],
    }


async def test_a_big_import_costs_the_first_turn_no_summary_call(engine, members, fake):
    export = parse_export(big_export(4000))
    counts = await members.admin_import("t", "ops", "ana", export)
    assert counts["messages"] == 4000
    fake.brain = default_brain
    scope = await engine.agent("t", "ana")
    fake.requests.clear()
    said = await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, "hi again"))
    assert said.replies == ["You said: hi again"]
    assert not any(is_summary_request(body) for body in fake.requests)
    assert len(fake.chat_requests) == 1

    # What went out of view is still found by a search.
    fake.brain = script(calls(tool_call("conversation_search", query="Biscuit-7731")), say("ok"))
    await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, "my cat's name?"))
    assert "Biscuit-7731 sleeps on the radiator" in " ".join(latest_results(fake.requests[-1]))
