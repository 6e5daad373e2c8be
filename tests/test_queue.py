"""The queue manager's pure decisions: no database, no model."""

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from core.memory.queue import Pressure, evict_until, pressure, units


@dataclass
class M:
    role: str
    tokens: int
    tool_calls: object = None


def test_pressure_levels():
    assert pressure(600, warning_tokens=700, budget=1000, already_warned=False) is Pressure.OK
    assert pressure(700, warning_tokens=700, budget=1000, already_warned=False) is Pressure.WARN
    assert pressure(900, warning_tokens=700, budget=1000, already_warned=True) is Pressure.OK
    assert pressure(1001, warning_tokens=700, budget=1000, already_warned=True) is Pressure.FLUSH


def test_function_call_and_results_form_one_unit():
    queue = [M("user", 1), M("assistant", 1, [{}]), M("tool", 1), M("tool", 1), M("user", 1)]
    assert [len(u) for u in units(queue)] == [1, 3, 1]


def test_evicts_oldest_first_down_to_target():
    queue = [M("user", 100) for _ in range(10)]
    evicted = evict_until(queue, fixed_tokens=100, target_tokens=600, protect=queue[-1])
    assert evicted == queue[:5]


def test_never_splits_a_call_from_its_result():
    queue = [M("user", 10), M("assistant", 10, [{}]), M("tool", 500), M("user", 10)]
    evicted = evict_until(queue, fixed_tokens=0, target_tokens=500, protect=queue[-1])
    assert evicted == queue[:3]


def test_protected_message_is_never_evicted():
    queue = [M("user", 5000), M("assistant", 10)]
    evicted = evict_until(queue, fixed_tokens=0, target_tokens=100, protect=queue[0])
    assert queue[0] not in evicted and evicted == [queue[1]]


roles = st.sampled_from(["user", "assistant", "call", "system"])


@given(
    st.lists(st.tuples(roles, st.integers(1, 400)), min_size=1, max_size=60), st.integers(0, 3000)
)
def test_eviction_invariants(spec, target):
    queue: list[M] = []
    for role, tokens in spec:
        if role == "call":
            queue += [M("assistant", tokens, [{}]), M("tool", tokens)]
        else:
            queue.append(M(role, tokens))
    protect = next((m for m in reversed(queue) if m.role == "user"), None)
    evicted = evict_until(queue, fixed_tokens=100, target_tokens=target, protect=protect)
    kept = [m for m in queue if not any(m is e for e in evicted)]
    assert protect is None or protect in kept
    # No orphaned results: every kept tool message follows its kept call.
    for i, m in enumerate(kept):
        if m.role == "tool":
            assert i > 0 and (kept[i - 1].role == "tool" or kept[i - 1].tool_calls)
    # Either the target is met or only the protected message is left to evict.
    remaining = 100 + sum(m.tokens for m in kept)
    assert remaining <= target or all(m is protect for m in kept)
