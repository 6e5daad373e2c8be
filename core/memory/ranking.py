"""Pure ranking decisions for search: fusion of ranked lists, and what a query leaves out.

    fuse(rankings, weights)     reciprocal-rank fusion of ranked ids, best first
    clean_query(query, names)   the query without the member's and the agent's names
    named_speaker(query, member, agent)  whose words the query asks for, by the name it uses
    as_said_by(query, name)     an English query in the words of the person it names, to embed
    named_things(texts)         the names of people, places and things written in texts
    agent_name(persona)         the name a persona gives the agent

The constants were chosen on LoCoMo (bench/locomo_recall.py; bench/README.md has the
measurements): fusion with a small constant (k=10) beats the usual 60 there, ranking the
turns next to the best hits adds about four points of recall at 5, and ranking the named
speaker's own messages once more adds about eight (a question that names one person is
nearly always answered by what that person said).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

DEPTH = 100  # ids taken from each ranking (full text, nearest vectors) before fusion
RRF_K = 10  # 1 / (k + rank): a small k trusts the top of each list more
ANCHORS = 20  # the best fused hits whose neighbouring messages are ranked as well
# full text, nearest vectors, messages next to an anchor, messages two away (the turn next
# to a hit at 1.0 gave LoCoMo 0-4 R@5 71.5, multi-hop 40.8, but cost the multilingual set
# ten points of R@5 in Chinese, where every line's reply then outranked the line: 0.7 kept)
NEIGHBOUR_WEIGHTS = (1.0, 1.0, 0.7, 0.35)
SPEAKER_WEIGHT = 2.0  # the fused list again, only the named speaker's messages
# A query naming a date ("on 8 May, 2023", core.memory.dates): the fused list again, only the
# messages of those days, at DATE_WEIGHT; the best DATE_RESULTS of them count as results.
# Chosen on LoCoMo 0-4 (weights 0.5-4 and 0-10 results tried; bench/README.md).
DATE_WEIGHT = 2.0
DATE_RESULTS = 5
# What counts as a result (ranking still uses every row of both lists): a row found by its
# vector alone when its cosine similarity to the query is at least SIMILARITY_FLOOR and within
# SIMILARITY_MARGIN of the best row's; a row found by its key words when its score is at least
# WORD_RATIO of the best one's; and the turns next to the best CONTEXT_ANCHORS of those.
# Chosen on LoCoMo conversations 0-4, checked on 5-9 (bench/README.md).
SIMILARITY_FLOOR = 0.3
SIMILARITY_MARGIN = 0.15
WORD_RATIO = 0.5
CONTEXT_ANCHORS = 5
# A message search tells at most this many results, the best ones (and says how many matched):
# two pages of five. On LoCoMo 0-4 the evidence past them was 2.3 points of recall (R@15 81.9
# against R@10 79.6), while a model paging on read every page of a search that held none:
# pages read per question 1.82 with all matches, 1.35 with 15, 1.22 with 10 (bench/README.md).
RESULTS_CAP = 10
# Messages naming the same people, places and things as the best hits (`named_things`: words
# written with a capital inside a sentence) that at most ENTITY_HELD of the member's messages
# hold, found by those words: the fused list's best ENTITY_TOP messages' names, ranked at
# ENTITY_WEIGHT. Chosen before measuring (round values), not fit: on LoCoMo 0-4 / 5-9 it
# gave R@5 +0.2 / +0.1, and on the multilingual set R@1 +9.5 in English (bench/README.md,
# fifth pass).
ENTITY_WEIGHT = 0.5
ENTITY_TOP = 3
ENTITY_HELD = 0.02
# The first ENTITY_NAMES names only: a hit holding thousands of capitalised words (a pasted
# list, a document) made each search take seconds (1,000 names: 4.1 s) to minutes (3,000:
# over 60 s), against 0.02 s without the names.
ENTITY_NAMES = 16


@dataclass(frozen=True)
class Closeness:
    """How near in meaning a row found by its vector alone must be to count as a result.
    Each embedding model spreads its similarities its own way (MiniLM from 0 to 0.9, e5
    between 0.7 and 0.9 for anything), so an embedder may carry its own (`closeness`)."""

    floor: float = SIMILARITY_FLOOR
    margin: float = SIMILARITY_MARGIN


def fuse(
    rankings: Sequence[Sequence[int]], weights: Sequence[float] | None = None, k: int = RRF_K
) -> list[int]:
    """Reciprocal-rank fusion (Cormack et al., 2009): list i gives an id w_i / (k + rank)."""
    scores: dict[int, float] = {}
    for index, ranking in enumerate(rankings):
        weight = weights[index] if weights else 1.0
        for rank, row_id in enumerate(ranking, start=1):
            scores[row_id] = scores.get(row_id, 0.0) + weight / (k + rank)
    return sorted(scores, key=lambda row_id: (-scores[row_id], -row_id))


def close_enough(
    similarities: Sequence[tuple[int, float]],
    floor: float | None = None,
    margin: float | None = None,
) -> set[int]:
    """The ids near enough in meaning to count as results: (id, cosine similarity) pairs at
    least `floor` and within `margin` of the best of them.

    The nearest vectors always fill their list, however far they are; ranking uses all of
    them, but only these count, so that "page 1 of n" tells how much really matched.
    """
    floor = SIMILARITY_FLOOR if floor is None else floor
    margin = SIMILARITY_MARGIN if margin is None else margin
    best = max((similarity for _, similarity in similarities), default=0.0)
    least = max(floor, best - margin)
    return {row_id for row_id, similarity in similarities if similarity >= least}


def word_matches(scored: Sequence[tuple[int, float]], ratio: float | None = None) -> set[int]:
    """The ids whose key-word score is at least `ratio` of the best one's: a row holding
    only the query's commonest word ("go", "day") is not a result beside rows holding its
    rare ones."""
    ratio = WORD_RATIO if ratio is None else ratio
    best = max((score for _, score in scored), default=0.0)
    return {row_id for row_id, score in scored if score >= ratio * best}


# A word with a letter first that does not begin a sentence: "we drove to Lisbon", "called
# Miso", "мы ездили в Казань"; `named_things` keeps those written with a capital.
_NAMED = re.compile(r"(?<![.!?:]\s)(?<=\s)([^\W\d_][\w'-]{2,})")


def named_things(texts: Iterable[str]) -> str:
    """The words of `texts` written with a capital inside a sentence (names of people,
    places, pets, things), each once, in order, the first ENTITY_NAMES of them: "Took the
    train to Vienna" -> "Vienna".

    A message about the same thing as the best hit may share no word with the query ("what
    did I name the kitten?" finds "We adopted a kitten, we called her Pebble"; later lines
    say "Pebble"), so the search looks for those names too. A sentence's first word is not
    taken (it has a capital anyway); a common word such as "I'm" is, and the search leaves it
    out by how many messages hold it. Any script with capitals counts (Latin, Cyrillic,
    Greek, Armenian); scripts without capitals give none.
    """
    found: dict[str, None] = {}
    for words in texts:
        for match in _NAMED.finditer(words):
            if match[0][0].isupper():
                found[match[0]] = None
                if len(found) == ENTITY_NAMES:
                    return " ".join(found)
    return " ".join(found)


def clean_query(query: str, names: Iterable[str]) -> str:
    """`query` without the given names (and their possessive 's).

    A name matches nearly every turn of a conversation in which it is said, so it only adds
    noise to key words and pulls greetings ("Hey Audrey!") to the top of nearest neighbours.
    A query that is nothing but names is kept as it is.
    """
    pattern = _names_pattern(names)
    if pattern is None:
        return query
    cleaned = re.sub(r"\s{2,}", " ", re.sub(pattern, " ", query, flags=re.IGNORECASE)).strip()
    return cleaned if re.search(r"\w", cleaned) else query


def named_speaker(query: str, member: str | None, agent: str | None) -> str | None:
    """The role ("user" for the member, "assistant" for the agent) whose messages `query`
    asks about, when it names one of the two and not the other ("what did Ann say about
    her dog"); None otherwise. Any word of a name counts ("Smith" for "Ann Smith")."""
    said = {
        role
        for role, name in (("user", member), ("assistant", agent))
        if (pattern := _names_pattern([name] if name else []))
        and re.search(pattern, query, flags=re.IGNORECASE)
    }
    return said.pop() if len(said) == 1 else None


# English words that mark a query as English (none of them is a word of German, Spanish,
# French, Italian, Portuguese or Dutch), and the third person a query about someone uses.
_ENGLISH = re.compile(
    r"\b(?:what|when|where|which|who|whose|why|how|did|does|would|could|should|been|the|about"
    r"|his|him|she)\b",
    re.IGNORECASE,
)
_FIRST_PERSON = {
    "he": "I",
    "she": "I",
    "him": "me",
    "his": "my",
    "her": "me",  # "my" before a noun (`_HER_BEFORE_A_WORD`)
    "hers": "mine",
    "himself": "myself",
    "herself": "myself",
}
_THIRD_PERSON = re.compile(r"\b(?:" + "|".join(_FIRST_PERSON) + r")\b", re.IGNORECASE)
_HER_BEFORE_A_WORD = re.compile(r"\bher(?=\s+\w)", re.IGNORECASE)
_AGREEMENT = re.compile(r"\b(does|has|is) I\b", re.IGNORECASE)
_AGREED = {"does": "do", "has": "have", "is": "am"}


def as_said_by(query: str, name: str | None) -> str | None:
    """`query` in the first person of the person it names ("What did Caroline research?" ->
    "What did I research?", "Ana's dog" -> "my dog"), or None when it is not English or
    names no one.

    What someone said about themselves is in their own words ("I'm off to go swimming"), so
    the query's embedding is made from what they would have said; the key words are the
    query's, without the name (`clean_query`). On LoCoMo's held-out conversations this
    gave 1 point of recall at 5 (bench/README.md). English only: in another language "I"
    would be a foreign word, and its pronouns are other words.
    """
    pattern = _names_pattern([name] if name else [])
    if pattern is None or not re.search(pattern, query, flags=re.IGNORECASE):
        return None
    possessive = pattern.removesuffix(r"(?:'s|’s)?\b") + r"(?:'s|’s)\b"
    if not (_ENGLISH.search(query) or re.search(possessive, query, flags=re.IGNORECASE)):
        return None
    said = re.sub(possessive, "my", query, flags=re.IGNORECASE)
    said = re.sub(pattern, "I", said, flags=re.IGNORECASE)
    said = _HER_BEFORE_A_WORD.sub("my", said)
    said = _THIRD_PERSON.sub(lambda m: _FIRST_PERSON[m.group(0).lower()], said)
    said = _AGREEMENT.sub(lambda m: _agreed(m.group(1)) + " I", said)
    # a name of several words: "Ann Smith's" -> "I my" -> "my"
    said = re.sub(r"\bI\s+(?=I\b|my\b)", "", said)
    said = re.sub(r"\s{2,}", " ", said).strip()
    if not re.search(r"\w", re.sub(r"\b(?:I|my|me|mine|myself)\b", "", said)):
        return None  # nothing but the person: the query as it is
    return said


def _agreed(verb: str) -> str:
    agreed = _AGREED[verb.lower()]
    return agreed.capitalize() if verb[0].isupper() else agreed


def _names_pattern(names: Iterable[str]) -> str | None:
    """A regular expression for any word of `names` (and its possessive 's), longest first."""
    words = sorted({w for name in names for w in re.findall(r"[\w'-]{2,}", name)}, key=len)
    if not words:
        return None
    return r"\b(?:" + "|".join(re.escape(w) for w in reversed(words)) + r")(?:'s|’s)?\b"


def agent_name(persona: str) -> str | None:
    """The name the persona gives the agent ("I am Companion, ..." or "My name is Sam")."""
    found = re.search(r"\b(?:I am|I'm|[Mm]y name is|[Cc]all me)\s+([A-Z][\w'-]+)", persona)
    return found.group(1) if found else None
