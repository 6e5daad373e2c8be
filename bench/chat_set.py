"""A conversational recall set of our own making, in LoCoMo's file format.

    python bench/chat_set.py --out /tmp/chat_set.json [--conversations 10] [--seed 7]
    python bench/locomo_recall.py --data /tmp/chat_set.json --vectors-cache /tmp/chat.pkl

How it was made: every sentence below was written for this repository (no third-party data,
nothing from LoCoMo or any corpus, nothing machine-translated). Each conversation is two
friends (the member and the companion, names drawn from a list) over twenty dated sessions.
Each of them has five of the topics below (what they do to stay active, cook, visit, keep,
worry about, make, their family), each told as two to four first-person lines in different
sessions that never name the topic ("Went climbing at the gym tonight, ..." for activities),
some split over two turns ("Guess what I made from scratch yesterday!" / "What?" / "Ramen!
The broth took eight hours ..."). The
rest is everyday small talk and replies. Questions name one of the two people, in the third
person, as LoCoMo's do:

    multi-hop (category 1)   a topic as a whole: "What does Maya do to stay active?", gold
                             every line of that topic
    temporal (2)             when one line happened: "When did Maya go climbing?"
    single-hop (4)           one line, asked in other words: "What did Maya bake?"

Both friends have lines on the same topics, so the other person's line is a near miss.
Everything is drawn from one seeded random generator: the same set on every run. It is a
set for choosing ranking constants on data that is not LoCoMo (which is for evaluation
only); it is written to a file outside the repository and read by locomo_recall.py.
"""

from __future__ import annotations

import argparse
import json
import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

NAMES = [
    "Maya", "Jonas", "Priya", "Theo", "Lena", "Marcus", "Aisha", "Hugo", "Rosa", "Felix",
    "Nadia", "Omar", "Ingrid", "Diego", "Chloe", "Samir", "Greta", "Kofi", "Elena", "Ravi",
]  # fmt: skip

# Each topic: (question templates for the whole topic, items). An item is
# (lines, single-hop question, temporal question); lines is one line, or (opener, detail)
# told over two turns with the other friend's short question between them. {n}: the name.
TOPICS: dict[str, tuple[list[str], list[tuple[str | tuple[str, str], str, str]]]] = {
    "active": (
        ["What does {n} do to stay active?", "What sports or activities is {n} into?"],
        [
            (
                "Went climbing at the gym tonight, my forearms are completely done.",
                "Where does {n} go climbing?",
                "When did {n} go climbing?",
            ),
            (
                "Took the kids swimming this morning, the water was freezing!",
                "Who did {n} take swimming?",
                "When did {n} go swimming?",
            ),
            (
                (
                    "You won't believe what I signed up for.",
                    "Salsa lessons on Tuesday nights, my feet hurt already.",
                ),
                "What lessons did {n} sign up for?",
                "When did {n} sign up for salsa lessons?",
            ),
            (
                "Did a 10k run along the river, new personal best!",
                "How far did {n} run along the river?",
                "When did {n} run the 10k?",
            ),
            (
                "Tried a yoga class with my neighbour, I could not touch my toes.",
                "Who did {n} go to yoga with?",
                "When did {n} try yoga?",
            ),
            (
                "Cycled all the way to the coast on Saturday, sixty kilometres.",
                "How far did {n} cycle to the coast?",
                "When did {n} cycle to the coast?",
            ),
        ],
    ),
    "cooked": (
        ["What has {n} cooked or baked?", "What dishes has {n} made?"],
        [
            (
                "Baked banana bread last night with walnuts, the whole flat smells amazing.",
                "What did {n} put in the banana bread?",
                "When did {n} bake banana bread?",
            ),
            (
                (
                    "Guess what I made from scratch yesterday!",
                    "Ramen! The broth took eight hours but it was worth it.",
                ),
                "How long did {n}'s broth take?",
                "When did {n} make ramen?",
            ),
            (
                "My first attempt at sourdough came out flat as a pancake.",
                "How did {n}'s sourdough turn out?",
                "When did {n} try sourdough?",
            ),
            (
                "Made my grandmother's lentil soup, it tastes like being eight again.",
                "Whose recipe did {n} use for the soup?",
                "When did {n} make lentil soup?",
            ),
            (
                "Threw together a mango curry for friends and nobody left a crumb.",
                "Who did {n} cook the curry for?",
                "When did {n} make the mango curry?",
            ),
        ],
    ),
    "places": (
        ["Where has {n} travelled?", "Which places has {n} visited?"],
        [
            (
                "Just got back from four days in Lisbon, the tiles everywhere are unreal.",
                "What did {n} like about Lisbon?",
                "When was {n} in Lisbon?",
            ),
            (
                (
                    "I'm writing to you from a tiny cabin with no signal, almost.",
                    "We're up in the mountains near Innsbruck, snow up to my knees.",
                ),
                "Where is {n}'s cabin?",
                "When did {n} stay in the cabin near Innsbruck?",
            ),
            (
                "Spent the weekend in Edinburgh, climbed Arthur's Seat in the rain.",
                "What did {n} climb in Edinburgh?",
                "When did {n} go to Edinburgh?",
            ),
            (
                "The market in Marrakech was the loudest place I have ever been.",
                "What did {n} think of Marrakech?",
                "When did {n} visit Marrakech?",
            ),
            (
                "Took the night train to Vienna, slept surprisingly well.",
                "How did {n} get to Vienna?",
                "When did {n} go to Vienna?",
            ),
        ],
    ),
    "pets": (
        ["What pets does {n} have?", "What animals live with {n}?"],
        [
            (
                "Biscuit chewed through another charger, that dog is a menace.",
                "What did {n}'s dog chew?",
                "When did {n}'s dog chew the charger?",
            ),
            (
                "We adopted a grey kitten from the shelter, we called her Pebble.",
                "What is the name of {n}'s kitten?",
                "When did {n} adopt the kitten?",
            ),
            (
                (
                    "There's a new member of the family, very slow and very old.",
                    "A tortoise called Sir Reginald, he's forty years old apparently.",
                ),
                "How old is {n}'s tortoise?",
                "When did {n} get the tortoise?",
            ),
            (
                "The goldfish survived the move, which is more than I can say for my plants.",
                "Which pet survived {n}'s move?",
                "When did {n} move with the goldfish?",
            ),
        ],
    ),
    "worries": (
        ["What has been stressing {n} out?", "What is {n} worried about?"],
        [
            (
                "My manager wants the whole report redone by Friday, I barely slept.",
                "What does {n}'s manager want by Friday?",
                "When did {n}'s manager ask for the report?",
            ),
            (
                "The landlord is raising the rent again and I don't know if we can stay.",
                "What is {n}'s landlord doing?",
                "When did {n} hear about the rent?",
            ),
            (
                (
                    "I had some news from the doctor today.",
                    "My dad needs knee surgery and he lives alone, so I'm scared.",
                ),
                "What surgery does {n}'s dad need?",
                "When did {n} hear about the surgery?",
            ),
            (
                "My car failed its inspection and the repair costs more than the car.",
                "What happened with {n}'s car?",
                "When did {n}'s car fail its inspection?",
            ),
        ],
    ),
    "made": (
        ["What has {n} made with their hands?", "What creative projects has {n} worked on?"],
        [
            (
                "Finished the quilt for my niece, two hundred little squares.",
                "Who did {n} make the quilt for?",
                "When did {n} finish the quilt?",
            ),
            (
                "My pottery class bowl came out lopsided but I love it.",
                "How did {n}'s bowl come out?",
                "When did {n} make the bowl?",
            ),
            (
                (
                    "Look what I finally finished! Took me all winter.",
                    "A bookshelf from old floorboards, it even stands straight.",
                ),
                "What did {n} build from floorboards?",
                "When did {n} finish the bookshelf?",
            ),
            (
                "Painted a sunset over the harbour, my first one in oils.",
                "What did {n} paint?",
                "When did {n} paint the harbour?",
            ),
        ],
    ),
    "people": (
        ["Who are the people in {n}'s family?", "Which relatives has {n} talked about?"],
        [
            (
                "My brother Sam started university, he calls me every day to ask how to cook.",
                "What does {n}'s brother ask about?",
                "When did {n}'s brother start university?",
            ),
            (
                "Grandpa turned ninety and danced at his own party.",
                "How old did {n}'s grandpa turn?",
                "When was {n}'s grandpa's party?",
            ),
            (
                "My cousin Ana is getting married in Seville next spring.",
                "Where is {n}'s cousin getting married?",
                "When did {n} hear about Ana's wedding?",
            ),
            (
                "Mum finally retired after thirty years of teaching.",
                "How long did {n}'s mum teach?",
                "When did {n}'s mum retire?",
            ),
        ],
    ),
}

SMALL_TALK = [
    "Morning! How's your week going so far?",
    "Ugh, Mondays. I need more coffee.",
    "It rained all day here, I stayed in with a blanket.",
    "Did you watch the match last night? What a finish.",
    "I keep forgetting to water my plants.",
    "Honestly I just want a long nap.",
    "The bus was late again, I walked half the way.",
    "I've been listening to that podcast you mentioned, it's great.",
    "Work is fine, nothing exciting really.",
    "We should catch up properly soon.",
    "I found an old photo of us from school, we looked ridiculous.",
    "The neighbours are having a party, it's so loud.",
    "I cleaned the whole flat today, feels good.",
    "Any plans for the weekend?",
    "I'm thinking about getting a new phone, mine is so slow.",
    "That new cafe on the corner does great croissants.",
    "I stayed up way too late reading again.",
    "Traffic was terrible this morning.",
    "Sorry I went quiet, it's been a busy few days.",
    "I finally sorted out my taxes, what a relief.",
    "The weather is lovely today, finally some sun.",
    "I'm so tired, I could sleep for a week.",
    "Did you ever finish that series we talked about?",
    "My phone died in the middle of the day, classic.",
    "I tried a new route to work, it was actually quicker.",
]
REPLIES = [
    "Oh wow, that sounds amazing!",
    "Haha, that's so you.",
    "No way! Tell me more.",
    "That must have been tough, I'm sorry.",
    "I love that, good for you!",
    "Same here, honestly.",
    "That's great news!",
    "Oh no, how are you feeling about it?",
    "Sounds like a lot, take care of yourself.",
    "I'm really happy for you.",
    "Ha, I can imagine.",
    "That's so lovely to hear.",
    "Wait, really? That's wild.",
    "Nice! How did it go?",
    "I totally get that.",
]
ASKS = ["What?", "Go on, what?", "Tell me!", "What is it?", "No idea, what?"]


def _date(start: datetime, session: int, rng: random.Random) -> datetime:
    return start + timedelta(days=9 * session + rng.randrange(0, 5), hours=rng.randrange(8, 21))


def _when(moment: datetime) -> str:
    hour = moment.strftime("%I").lstrip("0")
    return f"{hour}:{moment.strftime('%M %p').lower()} on {moment.day} {moment:%B, %Y}"


def conversation(index: int, rng: random.Random, sessions: int = 20) -> dict[str, Any]:
    """One conversation in LoCoMo's format, with its questions."""
    first, second = rng.sample(NAMES, 2)
    start = datetime(2023, 1, 1) + timedelta(days=rng.randrange(0, 300))
    # each person's told lines: (topic, item index) placed in distinct sessions
    plans: dict[str, list[tuple[str, int]]] = {}
    for person in (first, second):
        told = []
        for topic in rng.sample(sorted(TOPICS), 5):
            items = TOPICS[topic][1]
            for item in rng.sample(range(len(items)), rng.choice((2, 3, 3, 4))):
                told.append((topic, item))
        plans[person] = told
    by_session: dict[int, list[tuple[str, str, int]]] = {n: [] for n in range(1, sessions + 1)}
    for person, told in plans.items():
        for topic, item in told:
            by_session[rng.randrange(1, sessions + 1)].append((person, topic, item))
    conv: dict[str, Any] = {"speaker_a": first, "speaker_b": second}
    where: dict[tuple[str, str, int], list[str]] = {}
    dates: dict[tuple[str, str, int], datetime] = {}
    for n in range(1, sessions + 1):
        when = _date(start, n, rng)
        conv[f"session_{n}_date_time"] = _when(when)
        turns: list[dict[str, str]] = []
        facts = by_session[n]
        events: list[tuple[str, str, int] | None] = [*facts, *([None] * rng.randrange(6, 11))]
        rng.shuffle(events)
        speaker = rng.choice((first, second))

        def say(who: str, words: str, n: int = n, turns: list[dict[str, str]] = turns) -> str:
            dia = f"D{n}:{len(turns) + 1}"
            turns.append({"speaker": who, "dia_id": dia, "text": words})
            return dia

        for event in events:
            other = second if speaker == first else first
            if event is None:
                say(speaker, rng.choice(SMALL_TALK))
                say(other, rng.choice(REPLIES + SMALL_TALK))
                speaker = rng.choice((first, second))
                continue
            person, topic, item = event
            lines = TOPICS[topic][1][item][0]
            friend = second if person == first else first
            if isinstance(lines, tuple):
                say(person, lines[0])
                say(friend, rng.choice(ASKS))
                gold = say(person, lines[1])
            else:
                gold = say(person, lines)
            say(friend, rng.choice(REPLIES))
            where[event] = [gold]
            dates[event] = when
        conv[f"session_{n}"] = turns
    qa: list[dict[str, Any]] = []
    for person, told in plans.items():
        topics: dict[str, list[int]] = {}
        for topic, item in told:
            topics.setdefault(topic, []).append(item)
        for topic, items in topics.items():
            gold = [d for item in items for d in where[(person, topic, item)]]
            if len(items) > 1:
                question = rng.choice(TOPICS[topic][0]).format(n=person)
                qa.append({"question": question, "evidence": gold, "category": 1})
            for item in items:
                _, single, temporal = TOPICS[topic][1][item]
                evidence = where[(person, topic, item)]
                qa.append(
                    {"question": single.format(n=person), "evidence": evidence, "category": 4}
                )
                if rng.random() < 0.5:
                    qa.append(
                        {"question": temporal.format(n=person), "evidence": evidence, "category": 2}
                    )
    return {"sample_id": f"chat-{index}", "conversation": conv, "qa": qa}


def build(conversations: int = 10, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [conversation(i, rng) for i in range(conversations)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    samples = build(args.conversations, args.seed)
    args.out.write_text(json.dumps(samples, indent=1))
    questions = [qa for s in samples for qa in s["qa"]]
    turns = sum(len(v) for s in samples for k, v in s["conversation"].items() if k[-1].isdigit())
    print(f"{len(samples)} conversations, {turns} turns, {len(questions)} questions")


if __name__ == "__main__":
    main()
