"""Markdown from the model as Slack shows it: the same emphasis, links and headings.

Slack's mrkdwn is not markdown: `*x*` is bold there and italic in markdown, so a model's
*aside* must reach Slack as _aside_, and its **bold** as *bold*. Code is never touched.
"""

import re

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from adapters.text import to_slack_mrkdwn

CASES = {
    "italic with stars": ("a *quiet* word", "a _quiet_ word"),
    "italic with underscores": ("a _quiet_ word", "a _quiet_ word"),
    "bold with stars": ("a **loud** word", "a *loud* word"),
    "bold with underscores": ("a __loud__ word", "a *loud* word"),
    "bold and italic": ("***both***", "*_both_*"),
    "italic inside bold": ("**very *much* so**", "*very _much_ so*"),
    "bold inside italic": ("*very **much** so*", "_very *much* so_"),
    "several on a line": ("*a* and *b*, **c**", "_a_ and _b_, *c*"),
    "strikethrough": ("~~gone~~ now", "~gone~ now"),
    "link": ("see [the docs](https://x.org/a_b_c)", "see <https://x.org/a_b_c|the docs>"),
    "link with bold label": ("[**go**](https://x.org)", "<https://x.org|*go*>"),
    "mail link": ("[me](mailto:a@b.org)", "<mailto:a@b.org|me>"),
    "image": ("![cat](https://x.org/cat.png)", "<https://x.org/cat.png|cat>"),
    "relative link left alone": ("[here](/path)", "[here](/path)"),
    "heading": ("# Title", "*Title*"),
    "heading with closing hashes": ("### Title ###", "*Title*"),
    "heading with bold inside": ("## The **big** day", "*The big day*"),
    "heading with italic inside": ("## The *big* day", "*The _big_ day*"),
    "hashtag is no heading": ("#general rocks", "#general rocks"),
    "star bullets": ("* one *two*\n  + three", "• one _two_\n  • three"),
    "dash bullets stay": ("- one\n- two", "- one\n- two"),
    "arithmetic": ("5*3*2 = 30 and 2 * 3 * 4", "5*3*2 = 30 and 2 * 3 * 4"),
    "snake case": ("call snake_case_name now", "call snake_case_name now"),
    "lone star": ("a * b", "a * b"),
    "unclosed": ("x *y and __z", "x *y and __z"),
    "spaced markers": ("a ** b ** c", "a ** b ** c"),
    "code span": ("run `**raw** *x*` then *y*", "run `**raw** *x*` then _y_"),
    "a star in code does not close emphasis": ("*0 * `*`", "*0 * `*`"),
    "code inside italic": ("*use `a*b` here*", "_use `a*b` here_"),
    "a lone backtick inside italic": ("*don`t*", "_don`t_"),
    "double-tick code span": ("``a ` *b*`` *c*", "``a ` *b*`` _c_"),
    "fenced code": (
        "**Look:**\n```python\nx = a**2 * b  # *not* italic\n```\n*done*",
        "*Look:*\n```python\nx = a**2 * b  # *not* italic\n```\n_done_",
    ),
    "tilde fence": ("~~~\n~~kept~~\n~~~", "~~~\n~~kept~~\n~~~"),
    "unclosed fence": ("*a*\n```\n*b*", "_a_\n```\n*b*\n```"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_markdown_becomes_mrkdwn(name):
    markdown, mrkdwn = CASES[name]
    assert to_slack_mrkdwn(markdown) == mrkdwn


plain = st.text(
    st.characters(blacklist_characters="*_~`[]#!<>\n", blacklist_categories=("Cs",)), max_size=30
)
word = st.from_regex(r"[A-Za-z][A-Za-z ]{0,10}[A-Za-z]|[A-Za-z]", fullmatch=True)
code = st.text(st.characters(blacklist_characters="`\n", blacklist_categories=("Cs",)), min_size=1)


@given(plain)
def test_text_without_markup_is_unchanged(text):
    assert to_slack_mrkdwn(text) == text


@given(plain, word, plain)
def test_markdown_italic_is_slack_italic_and_bold_is_bold(before, words, after):
    before, after = f"{before} ", f" {after}"  # emphasis stands apart from the words around
    assume(not re.match(r"[ \t]*\+[ \t]", before))  # "+ " starts a bullet, which becomes "•"
    assert to_slack_mrkdwn(f"{before}*{words}*{after}") == f"{before}_{words}_{after}"
    assert to_slack_mrkdwn(f"{before}**{words}**{after}") == f"{before}*{words}*{after}"
    assert to_slack_mrkdwn(f"{before}~~{words}~~{after}") == f"{before}~{words}~{after}"


@given(st.lists(st.tuples(plain, code), min_size=1, max_size=5), st.text(max_size=200))
def test_code_is_never_touched(pieces, block):
    block = block.replace("```", "'''")
    text = " ".join(f"*{prose}* `{snippet}`" for prose, snippet in pieces)
    text += f"\n```\n{block}\n```\n**after**"

    converted = to_slack_mrkdwn(text)

    at = 0
    for _, snippet in pieces:  # every code span, verbatim and in order
        at = converted.index(f"`{snippet}`", at) + len(snippet) + 2
    assert f"\n```\n{block}\n```\n" in converted[at - 1 :]
    assert converted.endswith("*after*")
