"""The days a search query names (core.memory.dates): dates in several languages and
scripts, always with their year; words that only look like months are not dates."""

from datetime import date

from core.memory.dates import Days, days_named


def test_a_named_day_is_widened_by_a_day_either_side():
    widened = Days(date(2023, 11, 15), date(2023, 11, 17))
    for query in (
        "What did Tim say about his injury on 16 November, 2023?",
        "as mentioned on November 16, 2023",
        "the 16th of November 2023",
        "2023-11-16",
        "am 16. November 2023",
        "el 16 de noviembre de 2023",
        "le 16 novembre 2023",
        "16 ноября 2023 года",
        "2023年11月16日に何と言った",
    ):
        assert days_named(query) == widened, query


def test_a_month_or_a_year_names_all_its_days():
    may = Days(date(2023, 5, 1), date(2023, 5, 31))
    for query in ("in May 2023", "May, 2023", "2023-05", "im Mai 2023", "в мае 2023", "2023年5月"):
        assert days_named(query) == may, query
    assert days_named("Sept. 2023") == Days(date(2023, 9, 1), date(2023, 9, 30))
    assert days_named("in December 2024") == Days(date(2024, 12, 1), date(2024, 12, 31))
    assert days_named("February 2024") == Days(date(2024, 2, 1), date(2024, 2, 29))
    assert days_named("what did I do in 2024?") == Days(date(2024, 1, 1), date(2024, 12, 31))


def test_no_date_without_a_year_and_no_month_inside_another_word():
    for query in (
        "may I ask what my cat is called",
        "Mark 2023 was a good vintage",  # a name, not March
        "Janet said 2023 was hard",
        "on 8 May",  # no year: which May is not known
        "order BX-2291",
        "the year 2023 was long",  # a bare year is a number as often as a date
        "",
    ):
        assert days_named(query) is None, query


def test_an_impossible_day_falls_back_to_its_month():
    assert days_named("31 February 2023") == Days(date(2023, 2, 1), date(2023, 2, 28))
