"""The opener policy with a fixed clock: plain values in, plain values out."""

from datetime import UTC, datetime, time, timedelta

import pytest

from core.config import OpenerPolicy
from core.schedule.policy import (
    OpenerHistory,
    after_quiet_hours,
    catch_up,
    in_quiet_hours,
    jitter_for,
    next_opener,
)


def utc(*args):
    return datetime(*args, tzinfo=UTC)


def test_due_three_days_after_the_last_message_plus_jitter():
    policy = OpenerPolicy(timezone="UTC", quiet_start=time(0), quiet_end=time(0))
    last = utc(2026, 6, 1, 12)
    assert next_opener(policy, OpenerHistory(last), 0.0).at == utc(2026, 6, 4, 12)
    assert next_opener(policy, OpenerHistory(last), 0.5).at == utc(2026, 6, 4, 15)


def test_nothing_for_strangers_opt_outs_and_unanswered():
    last = utc(2026, 6, 1, 12)
    assert next_opener(OpenerPolicy(), OpenerHistory(None), 0).at is None
    assert next_opener(OpenerPolicy(enabled=False), OpenerHistory(last), 0).at is None
    capped = next_opener(OpenerPolicy(max_unanswered=1), OpenerHistory(last, last, 1), 0)
    assert capped.at is None and "unanswered" in capped.why
    two = OpenerPolicy(max_unanswered=2, quiet_start=time(0), quiet_end=time(0))
    assert next_opener(two, OpenerHistory(last, last, 1), 0).at is not None


def test_minimum_gap_after_the_previous_opener():
    policy = OpenerPolicy(
        max_unanswered=3, min_gap=timedelta(days=5), quiet_start=time(0), quiet_end=time(0)
    )
    plan = next_opener(policy, OpenerHistory(utc(2026, 6, 1), utc(2026, 6, 2), 1), 0)
    assert plan.at == utc(2026, 6, 7) and "after the last opener" in plan.why


@pytest.mark.parametrize(
    ("zone", "due", "expected"),
    [
        # 23:00 in Tokyo is quiet: wait for 09:00 next morning, Tokyo time.
        ("Asia/Tokyo", utc(2026, 6, 4, 14), utc(2026, 6, 5, 0)),
        # 03:00 in Los Angeles (10:00 UTC) is quiet until 09:00 PDT = 16:00 UTC.
        ("America/Los_Angeles", utc(2026, 6, 4, 10), utc(2026, 6, 4, 16)),
        # 12:00 in Berlin is fine as it is.
        ("Europe/Berlin", utc(2026, 6, 4, 10), utc(2026, 6, 4, 10)),
        # New York springs forward on 2026-03-08: 01:00 EST is quiet until 09:00 EDT (13 UTC).
        ("America/New_York", utc(2026, 3, 8, 6), utc(2026, 3, 8, 13)),
        # ...and falls back on 2026-11-01: 09:00 EST is 14:00 UTC.
        ("America/New_York", utc(2026, 11, 1, 5), utc(2026, 11, 1, 14)),
        # Berlin's spring change (2026-03-29): 23:30 CET on the 28th waits until 09:00 CEST.
        ("Europe/Berlin", utc(2026, 3, 28, 22, 30), utc(2026, 3, 29, 7)),
    ],
)
def test_quiet_hours_in_the_members_zone(zone, due, expected):
    policy = OpenerPolicy(timezone=zone)
    assert after_quiet_hours(due, policy) == expected
    assert not in_quiet_hours(expected, policy)


def test_quiet_hours_that_do_not_cross_midnight():
    policy = OpenerPolicy(quiet_start=time(13), quiet_end=time(15), timezone="UTC")
    assert after_quiet_hours(utc(2026, 1, 1, 14), policy) == utc(2026, 1, 1, 15)
    assert after_quiet_hours(utc(2026, 1, 1, 16), policy) == utc(2026, 1, 1, 16)


def test_catch_up_spreads_long_overdue_openers():
    policy = OpenerPolicy(timezone="UTC")
    now = utc(2026, 6, 10, 12)
    assert catch_up(now - timedelta(minutes=5), now, policy, timedelta(hours=3), 0.4) is None
    later = [
        catch_up(now - timedelta(days=2), now, policy, timedelta(hours=3), j)
        for j in (0.0, 0.3, 0.9)
    ]
    assert all(now < t <= now + timedelta(hours=3, seconds=1) for t in later)
    assert len(set(later)) == 3
    night = utc(2026, 6, 10, 23)  # overdue, but it is quiet time now: wait for the morning
    assert catch_up(night - timedelta(minutes=1), night, policy, timedelta(0), 0) == utc(
        2026, 6, 11, 9
    )


def test_jitter_is_stable_per_agent_and_varied_across_agents():
    assert jitter_for(1, "x") == jitter_for(1, "x")
    values = {jitter_for(i, "x") for i in range(50)}
    assert len(values) == 50 and all(0 <= v < 1 for v in values)
