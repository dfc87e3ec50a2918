"""Durations and counts said as an owner would say them, in English and Russian (R32)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.durations import HOURS, MINUTES, SECONDS, STEPS, TOKENS, say_count, say_duration, say_number

SECOND = 1_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
NBSP = "\u00a0"

DURATIONS = [
    # (ms, English, Russian)
    (0, "0 seconds", "0 секунд"),
    (1, "1 second", "1 секунда"),
    (1 * SECOND, "1 second", "1 секунда"),
    (2 * SECOND, "2 seconds", "2 секунды"),
    (5 * SECOND, "5 seconds", "5 секунд"),
    (11 * SECOND, "11 seconds", "11 секунд"),
    (21 * SECOND, "21 seconds", "21 секунда"),
    (22 * SECOND, "22 seconds", "22 секунды"),
    (30 * SECOND, "30 seconds", "30 секунд"),
    (59 * SECOND, "59 seconds", "59 секунд"),
    (59_499, "59 seconds", "59 секунд"),
    (59_500, "1 minute", "1 минута"),
    (60 * SECOND, "1 minute", "1 минута"),
    (90 * SECOND, "1.5 minutes", "1,5 минуты"),
    (100 * SECOND, "1.7 minutes", "1,7 минуты"),
    (2 * MINUTE, "2 minutes", "2 минуты"),
    (10 * MINUTE, "10 minutes", "10 минут"),
    (21 * MINUTE, "21 minutes", "21 минута"),
    (45 * MINUTE, "45 minutes", "45 минут"),
    (47 * MINUTE, "47 minutes", "47 минут"),
    (HOUR, "1 hour", "1 час"),
    (HOUR + 30 * SECOND, "60.5 minutes", "60,5 минуты"),
    (90 * MINUTE, "90 minutes", "90 минут"),
    (119 * MINUTE, "119 minutes", "119 минут"),
    (2 * HOUR - 3 * SECOND, "2 hours", "2 часа"),
    (2 * HOUR, "2 hours", "2 часа"),
    (150 * MINUTE, "2.5 hours", "2,5 часа"),
    (5 * HOUR, "5 hours", "5 часов"),
    (21 * HOUR, "21 hours", "21 час"),
    (24 * HOUR, "24 hours", "24 часа"),
    (10_000 * HOUR, "10,000 hours", f"10{NBSP}000 часов"),
]


@pytest.mark.parametrize(("ms", "english", "russian"), DURATIONS)
def test_say_duration(ms: int, english: str, russian: str) -> None:
    """R32: a duration reads as an owner would say it, in English and in Russian."""
    assert say_duration(ms, "en") == english
    assert say_duration(ms, "ru") == russian


def test_the_cases_of_the_issue() -> None:
    """R32: 30 s is not a "0-minute" deadline and 90 s is not "1-minute"."""
    assert say_duration(30_000, "en") == "30 seconds"
    assert say_duration(90_000, "en") == "1.5 minutes"
    assert say_duration(45 * MINUTE, "en") == "45 minutes"


def test_unknown_language_is_english() -> None:
    """R32: an unknown language is said in English."""
    for ms, english, _ in DURATIONS:
        assert say_duration(ms, "fr") == english
    assert say_count(3, "de", STEPS) == "3 steps"


def test_negative_duration_is_an_error() -> None:
    """R32: there is no way to say a negative duration; it is a caller's mistake."""
    with pytest.raises(ValueError):
        say_duration(-1, "en")


@given(st.integers(min_value=0, max_value=1_000 * HOUR), st.sampled_from(["en", "ru"]))
def test_every_duration_is_a_number_and_one_unit(ms: int, language: str) -> None:
    """R32: any duration is one number (at most one decimal) and one unit, never rounded to zero."""
    said = say_duration(ms, language)
    number, unit = said.rsplit(" ", 1)
    decimal = "," if language == "ru" else "."
    whole, _, tenth = number.partition(decimal)
    assert whole.replace(NBSP, "").replace(",", "").isdigit()
    assert tenth == "" or (len(tenth) == 1 and tenth != "0")
    units = {form for forms in (SECONDS, MINUTES, HOURS) for form in forms[language]}
    assert unit in units
    if ms > 0:
        assert not said.startswith("0 ")


@given(st.integers(min_value=0, max_value=1_000 * HOUR))
def test_said_duration_is_close_to_the_truth(ms: int) -> None:
    """R32: rounding stays within half a second, or within 5% of a tenth of the chosen unit."""
    said = say_duration(ms, "en")
    number, unit = said.rsplit(" ", 1)
    value = float(number.replace(",", ""))
    scale = {"second": SECOND, "minute": MINUTE, "hour": HOUR}[unit.removesuffix("s")]
    error = abs(value * scale - ms)
    assert error <= max(SECOND / 2, scale / 20) or (ms < SECOND // 2 and said == "1 second")


@given(st.integers(min_value=0, max_value=10 * HOUR), st.integers(min_value=0, max_value=10 * HOUR))
def test_longer_is_never_said_shorter(a: int, b: int) -> None:
    """R32: the said duration grows with the duration (compared through the English words)."""
    low, high = sorted((a, b))

    def value(ms: int) -> float:
        number, unit = say_duration(ms, "en").rsplit(" ", 1)
        scale = {"second": SECOND, "minute": MINUTE, "hour": HOUR}[unit.removesuffix("s")]
        return float(number.replace(",", "")) * scale

    assert value(low) <= value(high)


COUNTS = [
    # (n, English, Russian)
    (0, "0 steps", "0 шагов"),
    (1, "1 step", "1 шаг"),
    (2, "2 steps", "2 шага"),
    (4, "4 steps", "4 шага"),
    (5, "5 steps", "5 шагов"),
    (11, "11 steps", "11 шагов"),
    (12, "12 steps", "12 шагов"),
    (14, "14 steps", "14 шагов"),
    (21, "21 steps", "21 шаг"),
    (22, "22 steps", "22 шага"),
    (101, "101 steps", "101 шаг"),
    (111, "111 steps", "111 шагов"),
    (1_000, "1,000 steps", "1000 шагов"),
]


@pytest.mark.parametrize(("n", "english", "russian"), COUNTS)
def test_say_count(n: int, english: str, russian: str) -> None:
    """R32: a count takes the noun form its number needs, in English and Russian."""
    assert say_count(n, "en", STEPS) == english
    assert say_count(n, "ru", STEPS) == russian


def test_work_ceiling_tokens() -> None:
    """R32: the work ceiling reads with grouped digits as each language writes them."""
    assert say_count(1_000_000, "en", TOKENS) == "1,000,000 tokens"
    assert say_count(1_000_000, "ru", TOKENS) == f"1{NBSP}000{NBSP}000 токенов"
    assert say_count(500_001, "ru", TOKENS) == f"500{NBSP}001 токен"


def test_say_number() -> None:
    """R32: Russian never writes a comma inside a whole number (it is the decimal mark there)."""
    assert say_number(9_999, "ru") == "9999"
    assert say_number(12_345, "ru") == f"12{NBSP}345"
    assert say_number(12_345, "en") == "12,345"
    assert say_number(-1_500, "en") == "-1,500"
