"""Splitting replies for platform limits without breaking words or code blocks."""

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.text import split_message, to_slack_mrkdwn


def fences_balanced(part: str) -> bool:
    return len(re.findall(r"^```", part, re.MULTILINE)) % 2 == 0


def test_short_text_is_one_part():
    assert split_message("hello", 2000) == ["hello"]
    assert split_message("   ", 2000) == []


def test_splits_at_paragraphs_then_words():
    text = ("word " * 300).strip() + "\n\n" + ("other " * 100).strip()
    parts = split_message(text, 1000)
    assert all(len(p) <= 1000 for p in parts)
    assert " ".join(" ".join(parts).split()) == " ".join(text.split())
    assert all(not p.endswith("wor") for p in parts)


def test_a_code_block_that_fits_is_never_split():
    prose = "intro " * 250
    code = "```python\n" + "\n".join(f"x{i} = {i}" for i in range(100)) + "\n```"
    parts = split_message(prose + "\n" + code + "\nbye", 2000)
    assert any(code in p for p in parts), "the whole block sits in one part"
    assert all(fences_balanced(p) for p in parts)


def test_a_long_code_block_is_reopened_with_its_language():
    code = "```python\n" + "\n".join(f"value_{i} = compute({i})" for i in range(400)) + "\n```"
    parts = split_message(code, 2000)
    assert len(parts) > 1
    for part in parts:
        assert len(part) <= 2000 and part.startswith("```python\n") and part.endswith("\n```")
    lines = [line for p in parts for line in p.split("\n")[1:-1]]
    assert lines == code.split("\n")[1:-1]


def test_unclosed_fence_is_closed():
    parts = split_message("look:\n```\n" + "a\n" * 1500, 500)
    assert all(fences_balanced(p) for p in parts)


words = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30)


@settings(max_examples=200)
@given(
    st.lists(
        st.one_of(
            words.map(lambda w: w.replace("`", "")),
            st.just("\n"),
            st.just("\n\n"),
            st.lists(words.map(lambda w: w.replace("`", "")), max_size=30).map(
                lambda ls: "\n```js\n" + "\n".join(ls) + "\n```\n"
            ),
        ),
        max_size=200,
    ),
    st.integers(40, 2000),
)
def test_split_invariants(chunks, limit):
    text = " ".join(chunks)
    parts = split_message(text, limit)
    assert all(0 < len(p) <= limit for p in parts)
    assert all(fences_balanced(p) for p in parts)
    # Nothing is lost: every non-space character survives, in order (fences may be added).
    joined = re.sub(r"```(js)?", "", "".join(parts))
    original = re.sub(r"```(js)?", "", text)
    assert "".join(joined.split()) == "".join(original.split())


def test_slack_mrkdwn():
    text = "**bold** and [link](https://x.org) `**raw**`\n# Title\n```\n**code**\n```"
    assert to_slack_mrkdwn(text) == (
        "*bold* and <https://x.org|link> `**raw**`\n*Title*\n```\n**code**\n```"
    )
