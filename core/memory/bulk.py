"""Many messages stored at once: an import of a member's history.

    fit_in_view(rows, tokens, max_message_tokens)  what does not fit the window goes out
                                       of view before it is stored (no summary calls after)
    store_messages(store, rows, progress)          a thousand messages per INSERT, their
                                       tokens counted in a thread meanwhile, then their
                                       vector rows and the agent's word index in one pass

One INSERT per message (with its words counted, as a turn stores it) took 230-266 s for
20,000 messages; this is what an import uses instead. The caller has cleared the agent's
memory in the same transaction (`AgentStore.clear`), which also moves its context version.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

from sqlalchemy import insert, select

from core.memory import terms
from core.memory.prompt import message_tokens
from core.memory.store import MESSAGES, AgentStore
from core.models import Message, MessageVector

BULK = 1000  # messages per INSERT


def _tokens(fields: dict[str, Any], max_message_tokens: int) -> int:
    """What a message's columns cost in the prompt, as `counted` says (without building a
    mapped row: for many messages at once)."""
    row: Any = SimpleNamespace(**{"content": None, "tool_calls": None, **fields})
    return message_tokens(row, max_message_tokens)


def fit_in_view(rows: Sequence[dict[str, Any]], tokens: int, max_message_tokens: int) -> int:
    """Of messages about to be stored at once (an import, oldest first), leave in view the
    newest ones marked so that fit in `tokens`, starting at a member's message; the older
    ones are marked out of view (searchable as ever), so the first turn after does not
    summarise a history page by page. Counts only the newest few. Returns how many went."""
    shown = [n for n, row in enumerate(rows) if row.get("in_context", True)]
    kept, start = 0, None
    for n in reversed(shown):
        kept += _tokens(rows[n], max_message_tokens)
        if kept > tokens:
            break
        if rows[n]["role"] == "user":
            start = n  # the queue may start here
    else:
        return 0  # everything fits
    gone = [n for n in shown if start is None or n < start]
    for n in gone:
        rows[n]["in_context"] = False
    return len(gone)


async def store_messages(
    store: AgentStore, rows: Sequence[dict[str, Any]], progress: Callable[[int], None]
) -> None:
    """Store `rows` (each a message's columns, `created_at` included), oldest first,
    counted as a turn counts them; `progress(done)` after each thousand."""
    batches = [rows[start : start + BULK] for start in range(0, len(rows), BULK)]
    if not batches:
        return
    scope, limit = store.scope, store.max_message_tokens
    counting = asyncio.ensure_future(asyncio.to_thread(_values, batches[0], scope, limit))
    done = 0
    try:
        for n, batch in enumerate(batches):
            values = await counting
            if n + 1 < len(batches):  # the next thousand are counted while these go out
                following = batches[n + 1]
                counting = asyncio.ensure_future(
                    asyncio.to_thread(_values, following, scope, limit)
                )
            await store.session.execute(insert(MESSAGES), values)
            done += len(batch)
            progress(done)
    finally:
        counting.cancel()
    mine = (Message.tenant_id == scope.tenant_id) & (Message.agent_id == scope.agent_id)
    searchable_without_row = select(Message.id, Message.tenant_id, Message.agent_id).where(
        mine,
        Message.search_text.is_not(None),
        ~select(MessageVector.message_id).where(MessageVector.message_id == Message.id).exists(),
    )
    await store.session.execute(
        insert(MessageVector).from_select(
            ["message_id", "tenant_id", "agent_id"], searchable_without_row
        )
    )
    await terms.rebuild(store.session, scope)


def _values(rows: Sequence[dict[str, Any]], scope: Any, limit: int) -> list[dict[str, Any]]:
    """The INSERT's rows: every column named (one shape for the whole batch)."""
    return [
        {
            "tenant_id": scope.tenant_id,
            "agent_id": scope.agent_id,
            "event_id": None,
            "tool_calls": None,
            "tool_call_id": None,
            "search_text": None,
            "content": None,
            "in_context": True,
            **fields,
            "tokens": _tokens(fields, limit),
        }
        for fields in rows
    ]
