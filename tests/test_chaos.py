"""The chaos campaign, one fast seed: every guarantee, checked together, on real processes.

`companion run` serves Slack in HTTP mode and Discord through local fakes while members of
four tenants write (long, hostile, with files), an operator runs `import --replace`, the
model and the platforms fail and dawdle at random, and the process is SIGKILLed and
SIGTERMed and started again. At the end: every acknowledged message stored once and
answered, every prompt within the window, no reply in another member's channel, usage
equal to what the model billed. See tests/chaos/ for how; bench/chaos.py runs many seeds.
"""

from __future__ import annotations

import collections
from pathlib import Path

from tests.chaos.campaign import run_campaign
from tests.chaos.checks import (
    Checker,
    Records,
    Stored,
    model_violations,
    usage_violations,
)
from tests.chaos.faults import FAST, LONG
from tests.chaos.model import Call, Ledger, tag
from tests.chaos.plan import Item, Member, make_plan
from tests.chaos.process import Generation

SEED = 1


async def test_fast_chaos_seed(pg_url, schema, tmp_path):
    report = await run_campaign(SEED, FAST, pg_url, schema, tmp_path)
    counts = report.counts
    # The campaign did what it claims, or its verdict means nothing.
    assert counts["slack acked"] >= 10 and counts["discord sent"] >= 3, report.describe()
    assert counts["kills"] + counts["terms"] >= 2, report.describe()
    assert counts["model faults"] >= 1 and counts["imports"] == FAST.imports, report.describe()
    assert not report.violations, report.describe()


# The checks themselves, on records made by hand: each can pass, and each can fail.

ANN = Member("s1m1", "slack", "slack:T0001", "US1M1", "DUS1M1")
BOB = Member("s1m2", "slack", "slack:T0001", "US1M2", "DUS1M2")
ANN_AGENT, BOB_AGENT = 1, 2


def said(member: Member, n: int, acked: bool = True) -> Item:
    mark = tag(member.mid, n)
    return Item(0.0, member, f"{mark} hello", mark, acked_at=1.0 if acked else None)


def stored(*events: tuple[str, int, int, str], replies=None, recall=None) -> Stored:
    """Events as (tag, event id, agent, status); each in recall once unless `recall` says."""
    by_tag: dict = {}
    for mark, eid, agent, status in events:
        by_tag.setdefault(mark, []).append((eid, agent, "user_message", status))
    counted = collections.Counter({(agent, mark): 1 for mark, _, agent, _ in events})
    return Stored(
        agents={ANN_AGENT: (ANN.tenant, ANN.user), BOB_AGENT: (BOB.tenant, BOB.user)},
        events=by_tag,
        recall=counted if recall is None else collections.Counter(recall),
        passages=collections.Counter(),
        replies=replies or {},
        pending=sum(1 for *_, status in events if status == "pending"),
        handled={},
    )


def check(items: list[Item], db: Stored, posts: dict[str, list[str]]) -> list[str]:
    shown = Records(posts, {ANN.channel: ANN, BOB.channel: BOB})
    return sorted(v.kind for v in Checker(items, shown, db).run())


def test_checks_pass_a_campaign_where_everything_held():
    first, second = said(ANN, 1), said(BOB, 1)
    db = stored(
        (first.words_tag, 10, ANN_AGENT, "done"),
        (second.words_tag, 11, BOB_AGENT, "limited"),
        replies={10: [(f"ack {first.words_tag}", True)], 11: [("Slow down, please.", True)]},
    )
    posts = {ANN.channel: [f"ack {first.words_tag}"], BOB.channel: ["Slow down, please."]}
    assert check([first, second, said(ANN, 2, acked=False)], db, posts) == []


def test_checks_flag_lost_duplicated_stuck_and_unanswered_messages():
    lost, twice, stuck, silent = said(ANN, 1), said(ANN, 2), said(BOB, 1), said(BOB, 2)
    db = stored(
        (twice.words_tag, 10, ANN_AGENT, "done"),
        (twice.words_tag, 11, ANN_AGENT, "done"),
        (stuck.words_tag, 12, BOB_AGENT, "pending"),
        (silent.words_tag, 13, BOB_AGENT, "done"),
        replies={10: [(f"ack {twice.words_tag}", True)]},
    )
    posts = {ANN.channel: [f"ack {twice.words_tag}"]}
    kinds = check([lost, twice, stuck, silent], db, posts)
    assert kinds == ["duplicated", "lost", "stuck", "stuck", "unanswered", "unanswered"]


def test_checks_accept_recall_a_replacing_import_erased_and_nothing_else():
    before, after, never = said(ANN, 1), said(ANN, 2), said(ANN, 3)
    db = stored(
        (before.words_tag, 10, ANN_AGENT, "done"),
        (after.words_tag, 11, ANN_AGENT, "done"),
        replies={10: [(f"ack {before.words_tag}", True)], 11: [(f"ack {after.words_tag}", True)]},
        recall={},  # the import replaced recall; the turn after it must be there, and is not
    )
    db.turn_at, db.replaced = {10: 100.0, 11: 300.0}, {ANN_AGENT: [200.0]}
    posts = {ANN.channel: [f"ack {before.words_tag}", f"ack {after.words_tag}"]}
    assert check([before, after], db, posts) == ["lost"]
    # An import keeps the events: one that was never stored is lost, import or not.
    assert check([before, never], db, posts) == ["lost"]
    # Erased by the import still means answered before it.
    db.replies, posts = {11: db.replies[11]}, {ANN.channel: [f"ack {after.words_tag}"]}
    assert check([before], db, posts) == ["unanswered", "unanswered"]


def test_checks_flag_replies_in_the_wrong_channel_and_replies_never_shown():
    ann, bob = said(ANN, 1), said(BOB, 1)
    db = stored(
        (ann.words_tag, 10, ANN_AGENT, "done"),
        (bob.words_tag, 11, BOB_AGENT, "done"),
        replies={10: [(f"ack {ann.words_tag}", True)], 11: [(f"ack {bob.words_tag}", True)]},
    )
    posts = {ANN.channel: [f"ack {ann.words_tag}", f"ack {bob.words_tag}"]}  # Bob's, to Ann
    kinds = check([ann, bob], db, posts)
    assert kinds == ["crossed", "not_shown", "unanswered"]


def test_checks_flag_an_answer_to_another_message_and_an_answer_shown_twice():
    first, second = said(ANN, 1), said(ANN, 2)
    ack_first, ack_second = f"ack {first.words_tag}", f"ack {second.words_tag}"
    db = stored(
        (first.words_tag, 10, ANN_AGENT, "done"),
        (second.words_tag, 11, ANN_AGENT, "done"),
        replies={10: [(ack_first, True)], 11: [(ack_second, True)]},
    )
    assert check([first, second], db, {ANN.channel: [ack_first, ack_second]}) == []
    # The second message's turn answered the first one's words again (both shown).
    db.replies[11] = [(ack_first, True)]
    kinds = check([first, second], db, {ANN.channel: [ack_first, ack_first]})
    assert kinds == ["answered_twice", "misanswered", "unanswered"]


def test_checks_flag_answers_shown_out_of_order_unless_the_earlier_send_failed():
    first, second = said(ANN, 1), said(ANN, 2)
    ack_first, ack_second = f"ack {first.words_tag}", f"ack {second.words_tag}"
    db = stored(
        (first.words_tag, 10, ANN_AGENT, "done"),
        (second.words_tag, 11, ANN_AGENT, "done"),
        replies={10: [(ack_first, True)], 11: [(ack_second, True)]},
    )
    assert check([first, second], db, {ANN.channel: [ack_first, ack_second]}) == []
    assert check([first, second], db, {ANN.channel: [ack_second, ack_first]}) == ["out_of_order"]
    # The first answer's send failed once: it waited for a retry while the second went out.
    db.resent = {10}
    assert check([first, second], db, {ANN.channel: [ack_second, ack_first]}) == []
    # Only a failure before the answer that overtook it excuses it: not that one's own.
    db.resent = {11}
    assert check([first, second], db, {ANN.channel: [ack_second, ack_first]}) == ["out_of_order"]
    # A failed send of another of her replies before the one that overtook it excuses it
    # too: after a second failure the outbox lets the new answer go.
    third = said(ANN, 4)
    db.events[third.words_tag] = [(9, ANN_AGENT, "user_message", "failed")]
    db.recall[(ANN_AGENT, third.words_tag)] = 1
    db.replies[9] = [("Sorry, the model failed.", True)]
    posts = [ack_second, ack_first, "Sorry, the model failed."]
    db.resent = {9}
    assert check([first, second, third], db, {ANN.channel: posts}) == []
    # ... but not another member's.
    db.events[third.words_tag] = [(9, BOB_AGENT, "user_message", "failed")]
    assert "out_of_order" in check([first, second, third], db, {ANN.channel: posts})
    # Words beside a file wait for the file to be read: a later message may go first.
    db.resent = set()
    first.file_tag = tag(ANN.mid, 3)
    db.events[first.file_tag] = [(8, ANN_AGENT, "user_action", "done")]
    db.recall[(ANN_AGENT, first.file_tag)] = 1
    db.passages[(ANN_AGENT, first.file_tag)] = 1
    assert check([first, second], db, {ANN.channel: [ack_second, ack_first]}) == []


def test_checks_flag_over_window_prompts_mixed_prompts_and_unbilled_usage():
    ledger = Ledger(window=8192)
    ledger.calls += [
        Call("run1", True, 3000, {ANN.mid}, at=150.5, billed=3100),  # a flush, in Ann's turn
        Call("run1", False, 9000, {ANN.mid}, at=151.0, billed=9010),
        Call("run1", False, 2000, {ANN.mid, BOB.mid}, at=152.0, fault="500"),
    ]
    assert sorted(v.kind for v in model_violations(ledger)) == ["crossed", "over_window"]
    db = stored()
    db.handled = {ANN_AGENT: [150.0]}  # Ann's turn started at 150 and was committed
    agent_of = {ANN.mid: ANN_AGENT, BOB.mid: BOB_AGENT}
    run = Generation("run1", Path("run1.log"), ended_by="SIGTERM", wall=(100.0, 200.0))
    run.usage_after = {ANN_AGENT: 9010}  # the turn's own call, not its summary call
    found, _ = usage_violations([run], ledger, db, agent_of)
    assert [(v.kind, v.member) for v in found] == [("usage", ANN.mid)]
    run.usage_after = {ANN_AGENT: 9010 + 3100}
    assert usage_violations([run], ledger, db, agent_of) == ([], 0)
    # Killed in a turn of hers: the calls after her last finished turn (140) may roll back.
    db.handled = {ANN_AGENT: [140.0]}
    run.ended_by, run.usage_after = "SIGKILL", {}
    assert usage_violations([run], ledger, db, agent_of) == ([], 9010 + 3100)
    # ... but not when her last finished turn started after those calls.
    db.handled = {ANN_AGENT: [160.0]}
    assert [v.kind for v in usage_violations([run], ledger, db, agent_of)[0]] == ["usage"]


def test_plans_never_give_a_member_one_file_id_for_two_files():
    """On Slack a file id is one file: a member sharing it again shares the same bytes,
    which the product rightly stores once. A plan must not make that a 'lost' file."""
    for knobs in (FAST, LONG):
        for seed in range(1, 21):
            ids = collections.Counter(
                (i.member.mid, i.file_id) for i in make_plan(seed, knobs).items if i.file_id
            )
            assert max(ids.values(), default=1) == 1, (seed, ids.most_common(1))
