"""The invariants, checked once a campaign has settled: from the fakes' records and Postgres.

For every acknowledged item (a Slack event answered with HTTP 200, a Discord message sent
to a live gateway session), for each of its tags (its words, its file):

    lost          no event holds it (an import keeps the member's events); or its message
                  (its file's passage) is not in recall though no `import --replace` of
                  the member came after its turn
    erased        its turn came before an `import --replace` of the member, which replaced
                  the recall that held it: fine, and it must still have been answered
    duplicated    more than one event, recall message or archival passage holds it
    stuck         its event is not handled at the end (pending, or any status but done,
                  failed and limited)
    broken_agent  a probe, sent once every fault is off, failed anyway (status `failed`):
                  the member's agent cannot answer any more
    unanswered    words without a reply in the outbox, or handled (`done`) without the
                  model's `ack <tag>` in the member's channel
    misanswered   words whose event's replies answer another of the member's messages
                  (`ack <other tag>`): the turn went on from words that were not its own
    answered_twice  `ack <tag>` shown more than once in the member's channel
    out_of_order  `ack <tag>` shown after the answer to a message the member's agent
                  stored later (a later event), though no send of its replies had failed
                  (a reply whose send failed waits for a retry: later ones go first) and
                  it carried no file (words beside files wait, held, until the files are
                  read: a message written meanwhile is answered first)
    undelivered   a reply of its event still in the outbox
    not_shown     a reply marked delivered that the member's channel does not show

Across the campaign:

    crossed       a post in a member's channel naming another member's tag; a prompt with
                  two members' tags; a member's tag stored on another member's agent
    over_window   a prompt larger than COMPANION_CONTEXT_WINDOW, counted as the fake counts
    usage         the tokens in `usage` differ from what the model billed a process that
                  ended cleanly, the database restarted under it or not (or exceed it for a
                  killed one)
    process       `companion run` not ready, not stopping cleanly on SIGTERM; a failed import
                  (but for one that met a restart of the database and said so: it changed
                  nothing, being one transaction, and the operator runs it again)
"""

from __future__ import annotations

import collections
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.slack.posting import SLACK_TEXT_LIMIT, no_pings
from adapters.text import split_message, to_slack_mrkdwn
from tests.chaos.model import Ledger, members_in
from tests.chaos.plan import Item, Member
from tests.chaos.process import Generation, ImportRun

TAG_SQL = "#chaos/[a-z0-9]+/[a-z0-9]+#"
ACKED = re.compile(r"ack (#chaos/[a-z0-9]+/[a-z0-9]+#)")  # the brain's answer to a tag
HANDLED = ("done", "failed", "limited")  # an event's final statuses (core.events.EventStatus)
DISCORD_LIMIT = 2000


@dataclass(frozen=True)
class Violation:
    kind: str
    member: str
    tag: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind:<18} {self.member:<6} {self.tag:<22} {self.detail}"


@dataclass
class Records:
    """What the platforms showed, per member channel: texts in order."""

    posts: dict[str, list[str]]  # channel -> texts
    member_of_channel: dict[str, Member]


@dataclass
class Stored:
    """What Postgres holds, by tag."""

    agents: dict[int, tuple[str, str]]  # agent id -> (tenant key, user id)
    events: dict[str, list[tuple[int, int, str, str]]]  # tag -> [(event id, agent, kind, status)]
    recall: collections.Counter[tuple[int, str]]  # (agent, tag) -> trigger messages
    passages: collections.Counter[tuple[int, str]]  # (agent, tag) -> passages starting with it
    replies: dict[int, list[tuple[str, bool]]]  # event id -> [(text, delivered)]
    pending: int  # events not handled: any status but HANDLED
    handled: dict[int, list[float]]  # agent -> when its events' turns started (processed_at)
    turn_at: dict[int, float] = field(default_factory=dict)  # event id -> its processed_at
    # agent -> when each `import --replace` of it ran (its audit entry: written holding the
    # agent's lock, so every turn started either before it or after its commit)
    replaced: dict[int, list[float]] = field(default_factory=dict)
    # events with a reply whose send failed at least once (counted on the outbox row)
    resent: set[int] = field(default_factory=set)


async def load(db: AsyncEngine) -> Stored:
    async with db.connect() as conn:

        async def rows(sql: str) -> list[Any]:
            return list((await conn.execute(text(sql))).all())

        agents = {
            a: (t, u)
            for a, t, u in await rows(
                "SELECT a.id, t.key, u.external_id FROM agents a "
                "JOIN users u ON u.id = a.user_id JOIN tenants t ON t.id = u.tenant_id"
            )
        }
        events: dict[str, list[tuple[int, int, str, str]]] = collections.defaultdict(list)
        handled: dict[int, list[float]] = collections.defaultdict(list)
        turn_at: dict[int, float] = {}
        for eid, agent, kind, status, mark, when in await rows(
            f"SELECT id, agent_id, kind, status, substring(payload->>'text' from '{TAG_SQL}'), "
            "extract(epoch from processed_at) FROM events ORDER BY id"
        ):
            if mark:
                events[mark].append((eid, agent, kind, status))
            if when is not None:
                handled[agent].append(float(when))
                turn_at[eid] = float(when)
        agent_of = {member: a for a, member in agents.items()}
        replaced: dict[int, list[float]] = collections.defaultdict(list)
        for tenant, user, when in await rows(
            "SELECT t.key, l.target, extract(epoch from l.created_at) FROM audit_log l "
            "JOIN tenants t ON t.id = l.tenant_id "
            "WHERE l.action = 'import' AND (l.detail->>'replace')::boolean"
        ):
            if (tenant, user) in agent_of:
                replaced[agent_of[tenant, user]].append(float(when))
        recall = collections.Counter(
            (agent, mark)
            for agent, mark in await rows(
                f"SELECT agent_id, substring(content from '{TAG_SQL}') FROM messages "
                "WHERE role = 'user' OR (role = 'system' AND content LIKE '[user action]%')"
            )
            if mark
        )
        passages = collections.Counter(
            (agent, mark)
            for agent, mark in await rows(
                f"SELECT agent_id, substring(text from '^{TAG_SQL}') FROM passages"
            )
            if mark
        )
        replies: dict[int, list[tuple[str, bool]]] = collections.defaultdict(list)
        resent: set[int] = set()
        for eid, body, delivered, attempts in await rows(
            "SELECT event_id, text, delivered_at IS NOT NULL, attempts FROM outbox ORDER BY id"
        ):
            replies[eid].append((body, delivered))
            if attempts:
                resent.add(eid)
        final = ", ".join(f"'{status}'" for status in HANDLED)
        pending = int(
            await conn.scalar(text(f"SELECT count(*) FROM events WHERE status NOT IN ({final})"))
        )
    return Stored(
        agents,
        events,
        recall,
        passages,
        replies,
        pending,
        handled,
        turn_at,
        dict(replaced),
        resent,
    )


def shown_as(member: Member, reply: str) -> str:
    """The first post a reply becomes on the member's platform (the product's own formatting)."""
    if member.platform == "slack":
        return split_message(no_pings(to_slack_mrkdwn(reply)), SLACK_TEXT_LIMIT)[0]
    return split_message(reply, DISCORD_LIMIT)[0]


@dataclass
class Checker:
    items: list[Item]
    records: Records
    stored: Stored
    when: Callable[[Item], str] = lambda item: ""  # when it was acknowledged, for reports
    violations: list[Violation] = field(default_factory=list)
    erased: int = 0
    reordered: int = 0  # answers shown after later ones: a send of theirs failed, or held
    _item: Item | None = None

    def flag(self, kind: str, member: str, mark: str, detail: str) -> None:
        if self._item is not None:
            detail = f"{detail} [{self.when(self._item)}]"
        self.violations.append(Violation(kind, member, mark, detail))

    def run(self) -> list[Violation]:
        self._crossed_posts()
        for item in self.items:
            if item.acked_at is None:
                continue
            self._item = item
            for mark in item.tags:
                self._tag(item, mark, words=mark == item.words_tag)
        self._item = None
        self._in_order()
        if self.stored.pending:
            self.flag("stuck", "*", "*", f"{self.stored.pending} events not handled at the end")
        return self.violations

    def _crossed_posts(self) -> None:
        for channel, posts in self.records.posts.items():
            owner = self.records.member_of_channel.get(channel)
            if owner is None:
                continue
            for post in posts:
                others = members_in(post) - {owner.mid}
                if others:
                    self.flag(
                        "crossed", owner.mid, "*", f"shown {sorted(others)}'s tags: {post[:80]!r}"
                    )

    def _in_order(self) -> None:
        """Per member: the answers shown in the order their agent stored the messages
        (one agent handles its events oldest first; the outbox sends a member's earlier
        replies before later ones), unless a send of one of the member's replies before
        the later answer had failed (the outbox passes over a reply whose post failed, and
        after a second failure lets the new answer go, as the earlier ones may wait in
        another thread), or the earlier words were held for their files."""
        shown: dict[str, list[tuple[int, int, str]]] = collections.defaultdict(list)
        held = {item.words_tag for item in self.items if item.file_tag}
        failed: dict[str, list[int]] = collections.defaultdict(list)  # member -> event ids
        for item in self.items:
            owner = (item.member.tenant, item.member.user)
            for mark in item.tags:
                for eid, agent, _, _ in self.stored.events.get(mark, []):
                    if eid in self.stored.resent and self.stored.agents.get(agent) == owner:
                        failed[item.member.mid].append(eid)
        for item in self.items:
            mark, member = item.words_tag, item.member
            if item.acked_at is None or mark is None:
                continue
            posts = self.records.posts.get(member.channel, [])
            at = next((n for n, p in enumerate(posts) if p.startswith(f"ack {mark}")), None)
            mine = [
                e[0]
                for e in self.stored.events.get(mark, [])
                if self.stored.agents.get(e[1]) == (member.tenant, member.user)
            ]
            if at is not None and len(mine) == 1:
                shown[member.mid].append((mine[0], at, mark))
        for mid, answers in shown.items():
            answers.sort()
            for n, (eid, at, mark) in enumerate(answers):
                later = [(e, m) for e, a, m in answers[n + 1 :] if a < at]
                last = max((e for e, _ in later), default=0)
                excused = mark in held or any(e < last for e in failed[mid])
                self.reordered += int(bool(later) and excused)
                if later and not excused:
                    self.flag(
                        "out_of_order",
                        mid,
                        mark,
                        f"event {eid}'s answer shown after the answer to event {later[0][0]} "
                        f"({later[0][1]}), no send of the member's replies before it failed",
                    )

    def _erased(self, agent: int, eid: int) -> bool:
        """Whether an `import --replace` of the agent came after the event's turn."""
        turn = self.stored.turn_at.get(eid)
        return turn is not None and any(turn < t for t in self.stored.replaced.get(agent, []))

    def _answered_outside(self, member: Member, mark: str) -> bool:
        return any(mark in post for post in self.records.posts.get(member.channel, []))

    def _tag(self, item: Item, mark: str, words: bool) -> None:
        member, stored = item.member, self.stored
        mine = [
            e
            for e in stored.events.get(mark, [])
            if stored.agents.get(e[1]) == (member.tenant, member.user)
        ]
        for eid, agent, _, _ in stored.events.get(mark, []):
            if stored.agents.get(agent) != (member.tenant, member.user):
                self.flag(
                    "crossed",
                    member.mid,
                    mark,
                    f"stored as event {eid} of {stored.agents.get(agent)}",
                )
        if not mine:
            self.flag("lost", member.mid, mark, "acknowledged, never stored")
            return
        if len(mine) > 1:
            self.flag("duplicated", member.mid, mark, f"{len(mine)} events {[e[0] for e in mine]}")
        eid, agent, kind, status = mine[0]
        if item.probe and status == "failed":
            self.flag(
                "broken_agent", member.mid, mark, f"failed with nothing failing (event {eid})"
            )
        if status not in HANDLED:
            self.flag("stuck", member.mid, mark, f"event {eid} still {status}")
            return  # not in recall nor answered yet: that is what stuck means
        # Its turn came before an import that replaced recall: none left is right too.
        erased = self._erased(agent, eid)
        self.erased += int(erased)
        in_recall = stored.recall[(agent, mark)]
        if in_recall != 1 and not (erased and in_recall == 0):
            kind_of = "duplicated" if in_recall > 1 else "lost"
            self.flag(kind_of, member.mid, mark, f"{in_recall} messages in recall (event {eid})")
        count = stored.passages[(agent, mark)]
        if not words and count != 1 and not (erased and count == 0):
            self.flag(
                "duplicated" if count > 1 else "lost",
                member.mid,
                mark,
                f"{count} passages of the file",
            )
        self._replies(item, mark, eid, status, words)

    def _replies(self, item: Item, mark: str, eid: int, status: str, words: bool) -> None:
        member, replies = item.member, self.stored.replies.get(eid, [])
        if words and not replies:
            self.flag(
                "unanswered", member.mid, mark, f"no reply in the outbox (event {eid}, {status})"
            )
        if words and status == "done" and not self._answered_outside(member, mark):
            self.flag("unanswered", member.mid, mark, f"handled, but 'ack {mark}' never shown")
        if words:
            self._answered_once(member, mark, eid, replies)
        shown = collections.Counter(self.records.posts.get(member.channel, []))
        for body, delivered in replies:
            if not delivered:
                self.flag("undelivered", member.mid, mark, f"still in the outbox: {body[:60]!r}")
            elif shown[shown_as(member, body)] == 0:
                self.flag(
                    "not_shown",
                    member.mid,
                    mark,
                    f"marked delivered, not in the channel: {body[:60]!r}",
                )

    def _answered_once(
        self, member: Member, mark: str, eid: int, replies: list[tuple[str, bool]]
    ) -> None:
        """The event's replies answer its own words, and the channel shows that answer once."""
        others = {t for body, _ in replies for t in ACKED.findall(body)} - {mark}
        if others:
            self.flag("misanswered", member.mid, mark, f"event {eid} answered {sorted(others)}")
        shown = [
            p for p in self.records.posts.get(member.channel, []) if p.startswith(f"ack {mark}")
        ]
        if len(shown) > 1:
            self.flag("answered_twice", member.mid, mark, f"'ack {mark}' shown {len(shown)} times")


def model_violations(ledger: Ledger) -> list[Violation]:
    found = []
    for call in ledger.calls:
        if call.prompt_tokens > ledger.window:
            what = "summary" if call.summary else "turn"
            found.append(
                Violation(
                    "over_window",
                    ",".join(sorted(call.members)) or "-",
                    "*",
                    f"{what} prompt of {call.prompt_tokens} tokens > {ledger.window} "
                    f"({call.generation})",
                )
            )
        if len(call.members) > 1:
            found.append(
                Violation(
                    "crossed",
                    ",".join(sorted(call.members)),
                    "*",
                    f"one prompt holds several members' tags ({call.generation})",
                )
            )
    return found


def usage_violations(
    generations: list[Generation],
    ledger: Ledger,
    stored: Stored,
    agent_of: dict[str, int],
    excused: collections.Counter[str] | None = None,
) -> tuple[list[Violation], int]:
    """Per process and member: the tokens `usage` grew by against what the model billed.

    Every call is the member's whose tags its prompt holds. A process that stopped cleanly
    must have recorded exactly what it was billed, a restart of the database under it or
    not (a turn the restart cut records the calls it made once the database is back). A
    killed one, or one SIGTERMed that gave up turns still running past its grace period,
    may have recorded less: a turn is cut in the middle of a model call (where it waits),
    which the model may have billed though the process never read its answer, and the
    turn rolls back to run again later; only calls made after the start of the member's
    last turn it finished can belong to those. Calls that name no single member loosen the
    check by what they were billed. Returns the violations and the tokens billed to cut
    turns; `excused` counts the (process, member) pairs only the given-up turns excused,
    so that a campaign shows how often that allowance was needed."""
    found, cut = [], 0
    for gen in generations:
        start, end = gen.wall
        calls = ledger.of(gen.name)
        gave_up = gen.ended_by != "SIGKILL" and gave_up_turns(gen)
        cut_short = gen.ended_by == "SIGKILL" or gave_up
        loose = sum(c.billed for c in calls if c.member is None)
        for member in sorted({c.member for c in calls if c.member}):
            agent = agent_of.get(member, -1)
            mine = [c for c in calls if c.member == member]
            billed = sum(c.billed for c in mine)
            recorded = gen.usage_after.get(agent, 0) - gen.usage_before.get(agent, 0)
            finished = [t for t in stored.handled.get(agent, []) if start <= t <= end]
            since = max(finished, default=start)
            may_roll_back = sum(c.billed for c in mine if c.at >= since)
            if not cut_short:
                may_roll_back = 0
            wrong = recorded > billed + loose or recorded < billed - may_roll_back - loose
            if gave_up and not wrong and recorded < billed - loose and excused is not None:
                excused["usage short, excused by turns given up at SIGTERM"] += 1
            if wrong:
                summaries = sum(c.billed for c in mine if c.summary)
                found.append(
                    Violation(
                        "usage",
                        member,
                        "*",
                        f"{gen.name} ({gen.ended_by}): usage grew by {recorded}, the model "
                        f"billed {billed} (summary calls {summaries})"
                        + (
                            f", {may_roll_back} of it in turns cut by the kill"
                            if may_roll_back
                            else ""
                        ),
                    )
                )
            if cut_short:
                cut += max(0, billed - recorded)
    return found, cut


def gave_up_turns(gen: Generation) -> bool:
    """Whether a SIGTERMed process cancelled turns still running after its grace period
    (a loaded machine): they roll back as a SIGKILL's do, and resume on the next start."""
    if gen.ended_by != "SIGTERM" or not gen.log.exists():
        return False
    return "turns still running after" in gen.log.read_text(encoding="utf-8", errors="replace")


def process_violations(
    generations: list[Generation],
    imports: list[ImportRun],
    restarts: Sequence[tuple[float, float, str]] = (),
) -> list[Violation]:
    """Processes that were not ready or did not stop cleanly; imports that failed, but for
    one that met a restart of the database and said so (the operator runs it again)."""
    found = [Violation("process", "*", "*", p) for g in generations for p in g.problems]
    for run in imports:
        met_restart = any(run.started <= end and begin <= run.ended for begin, end, _ in restarts)
        if met_restart and run.returncode == 1 and "the database failed" in run.stderr:
            continue
        if run.returncode != 0:
            last = (run.stderr.strip().splitlines() or ["(no output)"])[-1]
            found.append(
                Violation(
                    "process", run.member, "*", f"import exited {run.returncode}: {last[:160]}"
                )
            )
    return found
