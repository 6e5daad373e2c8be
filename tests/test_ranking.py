"""Pure ranking decisions: fusion of ranked lists, what counts as a result, names left out
of a query, and the speaker a query names."""

from core.memory.ranking import (
    ENTITY_NAMES,
    agent_name,
    as_said_by,
    clean_query,
    close_enough,
    fuse,
    named_speaker,
    named_things,
    word_matches,
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


def test_an_english_query_is_embedded_in_the_words_of_the_person_it_names():
    assert as_said_by("What did Caroline research?", "Caroline") == "What did I research?"
    assert as_said_by("When did Melanie's kids visit her?", "Melanie") == (
        "When did my kids visit me?"
    )
    assert as_said_by("What does Nate like about his dog?", "Nate") == (
        "What do I like about my dog?"
    )
    assert as_said_by("Does Evan like her cooking?", "Evan") == "Do I like my cooking?"
    assert as_said_by("Ana's tulips", "Ana") == "my tulips"  # a possessive is English
    assert as_said_by("What is Ann Smith planning?", "Ann Smith") == "What am I planning?"
    assert as_said_by("Ann Smith's new job", "Ann Smith") == "my new job"


def test_a_query_in_another_language_or_naming_no_one_is_embedded_as_it_is():
    assert as_said_by("¿Qué dijo Ana sobre su perro?", "Ana") is None
    assert as_said_by("Was hat Ana über ihren Hund gesagt?", "Ana") is None
    assert as_said_by("Ana tulips", "Ana") is None  # no English word to go by
    assert as_said_by("What did she give her mom?", None) is None
    assert as_said_by("Who is Caroline?", "Caroline") is not None
    assert as_said_by("Caroline's?", "Caroline") is None  # nothing but the person
    assert as_said_by("What did Anaheim host?", "Ana") is None  # another word


def test_a_vector_counts_as_a_result_only_near_the_query_and_near_the_best():
    nearest = [(1, 0.62), (2, 0.50), (3, 0.46), (4, 0.31), (5, 0.12)]
    assert close_enough(nearest) == {1, 2}  # within 0.15 of the best
    assert close_enough(nearest, floor=0.3, margin=1.0) == {1, 2, 3, 4}  # the floor alone
    # when even the best is far, nothing is near: the model is told nothing matched
    assert close_enough([(7, 0.28), (8, 0.2)]) == set()
    assert close_enough([]) == set()


def test_a_row_holding_only_the_querys_common_words_is_no_result():
    scored = [(1, 5.2), (2, 3.1), (3, 2.6), (4, 0.4)]
    assert word_matches(scored) == {1, 2, 3}  # at least half the best score
    assert word_matches(scored, ratio=0.0) == {1, 2, 3, 4}
    assert word_matches([]) == set()


def test_the_names_a_message_writes_with_a_capital_are_its_named_things():
    texts = [
        "Took the night train to Vienna, slept well. Hey Maya, we saw Sam at the Louvre!",
        "Biscuit chewed a charger. Vienna was cold",
    ]
    # a sentence's first word is not a name; each name once, in order
    assert named_things(texts) == "Vienna Maya Sam Louvre"
    assert named_things(["we walked Biscuit"]) == "Biscuit"
    assert named_things(["うちの猫の名前はミソです", "no names here at all"]) == ""


def test_names_are_read_in_every_script_with_capitals():
    """Cyrillic, Greek and accented Latin names count as Latin ones do; a lower-case word,
    a number or a sentence's first word does not."""
    texts = [
        "Вчера мы ездили в Казань с Мурзиком. Город красивый",
        "we met Élodie and Ödön at 7pm, then Σοφία",
    ]
    assert named_things(texts) == "Казань Мурзиком Élodie Ödön Σοφία"


def test_a_hit_holding_thousands_of_names_gives_the_first_few():
    """A pasted list of 3,000 capitalised words made a search that met it run over a minute
    (its names all looked up): only the first ENTITY_NAMES are."""
    listed = "we met " + " ".join(f"Name{i:04d}" for i in range(3000))
    assert named_things([listed]).split() == [f"Name{i:04d}" for i in range(ENTITY_NAMES)]
