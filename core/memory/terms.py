"""Each agent's word index for ranking its messages and passages by key words (0019, 0021,
0022, 0024).

    message_terms (tenant_id, agent_id, lexeme, messages)
        how many of the agent's searchable messages hold each lexeme of their `tsv`;
        the row with the lexeme CORPUS ('') counts the searchable messages themselves
    message_words (tenant_id, agent_id, lexeme, message_id, words)
        which of them hold it, each with its number of distinct lexemes
    passage_words, passage_terms
        the same for archival passages (0022, 0024)

    counted_insert(message_insert)   the statement storing a searchable message: the message,
                                     its waiting vector row, its words listed and counted, one
                                     round trip
    rebuild(session, scope)          list and count one agent's words again (after a bulk change)
    REBUILD_ALL                      the same for every agent (bulk loads)
    list_passage(session, scope, id) list and count a stored passage's words
    counted_delete(passage_delete)   a DELETE of passages that takes their words' counts back
    LIST_PASSAGES, COUNT_PASSAGES    the same for every passage (bulk loads)

Full text ranking weighs a word by how rare it is among the agent's messages (inverse
document frequency), and finds the messages holding the query's words by index
(core.memory.keywords). Counting per query meant reading every message holding the words
and the agent's whole corpus on every search, and inside the member's wall the GIN index of
`tsv` cannot be used (migration 0021 says why); so both are kept as messages come and go.
`AgentStore` lists and counts each message it stores, and an agent's rows go with the agent
(a foreign key, ON DELETE CASCADE) or are cleared with its messages; paths that change many
messages at once (eval's reset to an imported past, bulk loaders) call `rebuild`.
"""

from __future__ import annotations

from sqlalchemy import (
    Delete,
    Insert,
    Select,
    Table,
    func,
    insert,
    literal,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import insert as upsert
from sqlalchemy.ext.asyncio import AsyncSession

from core.models import Message, MessageTerm, MessageVector, MessageWord, Passage, PassageTerm
from core.scope import Scope

CORPUS = ""  # no lexeme is empty: this row counts the searchable messages
_AGENT = "AND tenant_id = :tenant AND agent_id = :agent"  # a `{where}` for one agent's rows
MESSAGES: Table = Message.__table__  # type: ignore[assignment]
VECTORS: Table = MessageVector.__table__  # type: ignore[assignment]
TERMS: Table = MessageTerm.__table__  # type: ignore[assignment]
WORDS: Table = MessageWord.__table__  # type: ignore[assignment]
PASSAGES: Table = Passage.__table__  # type: ignore[assignment]
PASSAGE_TERMS: Table = PassageTerm.__table__  # type: ignore[assignment]

# Every agent's counts and words, from its messages (the tables empty, or the agent's rows
# deleted); `{where}` narrows the messages.
REBUILD_ALL = (
    """
    INSERT INTO message_terms (tenant_id, agent_id, lexeme, messages)
    SELECT tenant_id, agent_id, lexeme, count(*) FROM messages,
           unnest(array_append(tsvector_to_array(tsv), '')) AS lexeme
    WHERE search_text IS NOT NULL {where}
    GROUP BY tenant_id, agent_id, lexeme
    """,
    """
    INSERT INTO message_words (tenant_id, agent_id, lexeme, message_id, words)
    SELECT tenant_id, agent_id, lexeme, id, length(tsv) FROM messages,
           unnest(tsvector_to_array(tsv)) AS lexeme
    WHERE search_text IS NOT NULL {where}
    """,
)


def counted_insert(message: Insert) -> Select[tuple[int]]:
    """`message` (an INSERT of one searchable message) with what comes with it: the empty
    `message_vectors` row the embedding worker fills, and its lexemes listed and counted for
    its agent. Selects the new message's id."""
    new = message.returning(
        MESSAGES.c.id, MESSAGES.c.tenant_id, MESSAGES.c.agent_id, MESSAGES.c.tsv
    ).cte("new_message")
    vector = (
        insert(VECTORS)
        .from_select(
            ["message_id", "tenant_id", "agent_id"],
            select(new.c.id, new.c.tenant_id, new.c.agent_id),
        )
        .cte("new_vector")
    )
    lexeme = func.unnest(func.array_append(func.tsvector_to_array(new.c.tsv), literal(CORPUS)))
    counted = upsert(TERMS).from_select(
        ["tenant_id", "agent_id", "lexeme", "messages"],
        select(new.c.tenant_id, new.c.agent_id, lexeme.label("lexeme"), literal(1))
        .select_from(new)
        .order_by(text("lexeme")),  # one order of row locks for every writer
    )
    counted = counted.on_conflict_do_update(
        index_elements=[TERMS.c.tenant_id, TERMS.c.agent_id, TERMS.c.lexeme],
        set_={"messages": TERMS.c.messages + counted.excluded.messages},
    )
    listed = insert(WORDS).from_select(
        ["tenant_id", "agent_id", "lexeme", "message_id", "words"],
        select(
            new.c.tenant_id,
            new.c.agent_id,
            func.unnest(func.tsvector_to_array(new.c.tsv)),
            new.c.id,
            func.length(new.c.tsv),
        ),
    )
    return (
        select(new.c.id)
        .add_cte(vector)
        .add_cte(counted.cte("new_terms"))
        .add_cte(listed.cte("new_words"))
    )


async def rebuild(session: AsyncSession, scope: Scope) -> None:
    """List and count the agent's searchable messages' lexemes again, from the messages."""
    params = {"tenant": scope.tenant_id, "agent": scope.agent_id}
    for table in ("message_terms", "message_words"):
        await session.execute(text(f"DELETE FROM {table} WHERE true {_AGENT}"), params)
    for statement in REBUILD_ALL:
        await session.execute(text(statement.format(where=_AGENT)), params)


# The words of passages (`{where}` narrows them), into `passage_words`.
LIST_PASSAGES = """
INSERT INTO passage_words (tenant_id, agent_id, lexeme, passage_id, words)
SELECT tenant_id, agent_id, lexeme, id, length(tsv) FROM passages,
       unnest(tsvector_to_array(tsv)) AS lexeme
WHERE true {where}
"""
# Every agent's passage counts, into an empty `passage_terms` (bulk loads; `{where}` narrows
# the passages).
COUNT_PASSAGES = """
INSERT INTO passage_terms (tenant_id, agent_id, lexeme, passages)
SELECT tenant_id, agent_id, lexeme, count(*) FROM passages,
       unnest(array_append(tsvector_to_array(tsv), '')) AS lexeme
WHERE true {where}
GROUP BY tenant_id, agent_id, lexeme
"""
# One new passage's words, listed and counted (row locks in lexeme order, as for messages).
_ONE_PASSAGE = _AGENT + " AND id = :id"
_LIST_AND_COUNT_PASSAGE = f"""
WITH listed AS ({LIST_PASSAGES.format(where=_ONE_PASSAGE)})
{COUNT_PASSAGES.format(where=_ONE_PASSAGE)}
ORDER BY lexeme
ON CONFLICT (tenant_id, agent_id, lexeme)
DO UPDATE SET passages = passage_terms.passages + excluded.passages
"""


async def list_passage(session: AsyncSession, scope: Scope, passage_id: int) -> None:
    """List the words of the agent's passage `passage_id` in `passage_words`, which archival
    search ranks by, and count them in `passage_terms`; its words go with the passage (a
    foreign key, ON DELETE CASCADE), its counts with `counted_delete`."""
    await session.execute(
        text(_LIST_AND_COUNT_PASSAGE),
        {"tenant": scope.tenant_id, "agent": scope.agent_id, "id": passage_id},
    )


def counted_delete(passages: Delete) -> Select[tuple[int]]:
    """`passages` (a DELETE of one agent's passages) with their words' counts taken back, in
    one statement. Selects the ids of the passages deleted."""
    gone = passages.returning(
        PASSAGES.c.id, PASSAGES.c.tenant_id, PASSAGES.c.agent_id, PASSAGES.c.tsv
    ).cte("gone")
    lexeme = func.unnest(func.array_append(func.tsvector_to_array(gone.c.tsv), literal(CORPUS)))
    each = select(gone.c.tenant_id, gone.c.agent_id, lexeme.label("lexeme")).subquery("each")
    keys = (each.c.tenant_id, each.c.agent_id, each.c.lexeme)
    counts = select(*keys, func.count().label("n")).group_by(*keys).cte("counts")
    same_row = (
        PASSAGE_TERMS.c.tenant_id == counts.c.tenant_id,
        PASSAGE_TERMS.c.agent_id == counts.c.agent_id,
        PASSAGE_TERMS.c.lexeme == counts.c.lexeme,
    )
    locked = (  # in lexeme order, as every writer of the counts takes its row locks
        select(PASSAGE_TERMS.c.lexeme)
        .where(*same_row)
        .order_by(PASSAGE_TERMS.c.lexeme)
        .with_for_update(of=PASSAGE_TERMS)
        .cte("locked")
    )
    uncounted = (
        update(PASSAGE_TERMS)
        .where(*same_row, PASSAGE_TERMS.c.lexeme.in_(select(locked.c.lexeme)))
        .values(passages=PASSAGE_TERMS.c.passages - counts.c.n)
        .cte("uncounted")
    )
    return select(gone.c.id).add_cte(uncounted)
