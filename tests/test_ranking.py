"""Pure ranking decisions: fusion of ranked lists, names left out of a query, the speaker
a query names, and which messages to score first for the best by key words."""

import math
from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from core.memory.ranking import (
    agent_name,
    clean_query,
    fuse,
    length_norm,
    named_speaker,
    shortlist,
)


def test_a_row_found_by_both_rankings_rises_above_rows_found_by_one():
    by_words = [1, 2, 3]
    by_meaning = [4, 3, 5]
    fused = fuse([by_words, by_meaning])
    assert fused[0] == 3  # third and second: beats any single first place
    assert set(fused) == {1, 2, 3, 4, 5}


def test_a_weight_below_one_keeps_a_list_behind_the_main_ones():
    main = [10, 11]
    neighbours = [20, 21]
    fused = fuse([main, main, neighbours], [1.0, 1.0, 0.5])
    assert fused == [10, 11, 20, 21]
    assert fuse([[1], [2]], [1.0, 2.0])[0] == 2


def test_the_names_of_the_member_and_the_agent_leave_the_query():
    names = ["Caroline", "Melanie"]
    assert clean_query("What did Caroline research?", names) == "What did research?"
    assert clean_query("When did Melanie's kids visit caroline", names) == "When did kids visit"
    assert clean_query("Ana Lucia's dog", ["Ana Lucia"]) == "dog"
    # a word that only contains a name is kept
    assert clean_query("Anaheim trip", ["Ana"]) == "Anaheim trip"


def test_a_query_that_is_only_names_is_kept():
    assert clean_query("Caroline?", ["Caroline"]) == "Caroline?"
    assert clean_query("anything", []) == "anything"


def test_the_agent_is_named_by_its_persona():
    assert agent_name("I am Companion, a warm friend.") == "Companion"
    assert agent_name("Hi. My name is Sam and I like tea.") == "Sam"
    assert agent_name("A friendly helper.") is None


def test_a_query_naming_one_speaker_asks_for_that_speakers_messages():
    assert named_speaker("What did Caroline research?", "Caroline", "Melanie") == "user"
    assert named_speaker("where has melanie's family camped", "Caroline", "Melanie") == (
        "assistant"
    )
    assert named_speaker("Smith's new job", "Ann Smith", "Companion") == "user"


def test_a_query_naming_both_or_neither_prefers_no_side():
    assert named_speaker("When did Caroline meet Melanie?", "Caroline", "Melanie") is None
    assert named_speaker("the dog's name", "Caroline", "Melanie") is None
    assert named_speaker("Carolines", "Caroline", "Melanie") is None  # another word
    assert named_speaker("Ann", None, None) is None
    assert named_speaker("Sam's plan", "Sam", "Sam") is None  # the same name: no side


# ---------------------------------------------------------------- key-word shortlists

weights_and_counts = st.lists(
    st.tuples(st.floats(0.05, 12.0), st.integers(1, 50_000)), min_size=1, max_size=8
)


@settings(max_examples=300, deadline=None)
@given(words=weights_and_counts, wanted=st.sampled_from([5, 25, 100]))
def test_no_message_outside_a_shortlist_can_outscore_its_bound(words, wanted):
    """Whatever words it holds and however long it is, a message holding no shortlisted
    combination scores at most the bound, and one holding a combination is shortlisted."""
    plan = shortlist(words, 100_000, wanted)
    if plan is None:
        return
    weight = [w for w, _ in words]
    for size in range(1, len(words) + 1):
        for held in combinations(range(len(words)), size):
            listed = any(set(group) <= set(held) for group in plan.groups)
            if listed:
                continue
            total = sum(weight[i] for i in held)
            for length in (size, size + 1, 10, 60):
                assert total / length_norm(length) <= plan.bound + 1e-12


def test_a_shortlist_only_when_it_is_small_and_settles_the_ranking():
    def word(df: int, corpus: int = 100_000) -> tuple[float, int]:
        return math.log(1 + (corpus - df + 0.5) / (df + 0.5)), df

    assert shortlist([word(3000)], 100_000, 100) is None  # one word: every match counts
    # two words together in ~120 messages: those, since no message with one can beat them
    pair = shortlist([word(3154), word(3833)], 100_000, 100)
    assert pair is not None and pair.groups == ((0, 1),)
    # together in ~50 only, and alone each scores about the same: every match is scored
    assert shortlist([word(2528), word(2008)], 100_000, 100) is None
    # a rare word, or both common ones
    rare = shortlist([word(50), word(5000), word(6000)], 100_000, 100)
    assert rare is not None and set(rare.groups) == {(0,), (1, 2)}
