"""Durations and counts said as an owner would say them, in English and Russian (R32).

Owner-facing texts never show a raw millisecond count or a truncated `ms // 60_000` ("0-minute
deadline" for 30 s). `say_duration` picks one unit by these rules, rounding half up with integer
arithmetic (the result is the same in a workflow, an activity and a test):

* **seconds** below one minute: whole seconds, a positive duration never says "0 seconds"
  (30 000 ms → "30 seconds", 1 000 ms → "1 second", 59 400 ms → "59 seconds");
* **minutes** from one minute to below two hours, with at most one decimal when not whole
  (60 s → "1 minute", 90 s → "1.5 minutes", 100 s → "1.7 minutes" — one decimal, never
  "1 minute 40 seconds"; 45 min → "45 minutes", 90 min → "90 minutes"), except that exactly one
  hour is said as "1 hour";
* **hours** from two hours, with at most one decimal when not whole (2 h → "2 hours",
  150 min → "2.5 hours").

A value that rounds up to the next unit's boundary is said in that unit (59.6 s → "1 minute",
119.96 min → "2 hours").

Russian uses a decimal comma, the plural form its number needs ("1 секунда", "2 секунды",
"5 секунд", "21 минута") and the genitive singular after a fraction ("1,5 минуты", "2,5 часа").
Every form is the plain (nominative) one: texts are phrased so that it fits, for example
"the deadline of {deadline}" and "срок ({deadline})", never "the {n}-minute deadline".
An unknown language is said in English.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

NounForms = Mapping[str, Sequence[str]]
"""A noun's forms by language: English (singular, plural); Russian (one, few, many).

Russian "one" is for 1, 21, 31 … (not 11); "few" for 2–4, 22–24 … (not 12–14); "many" for the
rest. The Russian "few" form is also the genitive singular said after a fraction ("1,5 минуты").
"""

SECONDS: Final[NounForms] = {"en": ("second", "seconds"), "ru": ("секунда", "секунды", "секунд")}
MINUTES: Final[NounForms] = {"en": ("minute", "minutes"), "ru": ("минута", "минуты", "минут")}
HOURS: Final[NounForms] = {"en": ("hour", "hours"), "ru": ("час", "часа", "часов")}
TOKENS: Final[NounForms] = {"en": ("token", "tokens"), "ru": ("токен", "токена", "токенов")}
STEPS: Final[NounForms] = {"en": ("step", "steps"), "ru": ("шаг", "шага", "шагов")}

_SECOND_MS: Final = 1_000
_MINUTE_MS: Final = 60_000
_HOUR_MS: Final = 3_600_000
_NBSP: Final = "\u00a0"


def say_duration(ms: int, language: str) -> str:
    """`ms` milliseconds as an owner would say them in `language` (R32); see the module for the rules."""
    if ms < 0:
        raise ValueError(f"a duration cannot be negative: {ms} ms")
    seconds = _round_half_up(ms, _SECOND_MS)
    if ms > 0 and seconds == 0:
        seconds = 1
    if seconds < 60:
        return say_count(seconds, language, SECONDS)
    minute_tenths = _round_half_up(ms * 10, _MINUTE_MS)
    if minute_tenths == 600:
        return say_count(1, language, HOURS)
    if minute_tenths < 1_200:
        return _say_tenths(minute_tenths, language, MINUTES)
    return _say_tenths(_round_half_up(ms * 10, _HOUR_MS), language, HOURS)


def say_count(n: int, language: str, forms: NounForms) -> str:
    """`n` with the noun form its number needs in `language` (R32): "1 step", "21 шаг", "5 шагов".

    Large numbers are grouped as the language writes them: "1,000,000 tokens", "1 000 000 токенов"
    (Russian groups from five digits, with no-break spaces; "1000 токенов" stays whole).
    """
    language = _language(language, forms)
    return f"{say_number(n, language)} {forms[language][_form_index(n, language)]}"


def say_number(n: int, language: str) -> str:
    """A whole number written as `language` writes it: "1,000,000" in English, "1 000 000" in Russian."""
    if n < 0:
        return "-" + say_number(-n, language)
    if language == "ru":
        return f"{n:,}".replace(",", _NBSP) if n >= 10_000 else str(n)
    return f"{n:,}"


def _say_tenths(tenths: int, language: str, forms: NounForms) -> str:
    """A count of tenths of a unit: whole ("2 hours"), or with one decimal ("2.5 hours", "2,5 часа")."""
    whole, tenth = divmod(tenths, 10)
    if tenth == 0:
        return say_count(whole, language, forms)
    language = _language(language, forms)
    decimal = "," if language == "ru" else "."
    # English says the plural after any fraction; Russian the genitive singular (its "few" form).
    return f"{say_number(whole, language)}{decimal}{tenth} {forms[language][1]}"


def _form_index(n: int, language: str) -> int:
    n = abs(n)
    if language == "ru":
        if n % 10 == 1 and n % 100 != 11:
            return 0
        if 2 <= n % 10 <= 4 and not 12 <= n % 100 <= 14:
            return 1
        return 2
    return 0 if n == 1 else 1


def _language(language: str, forms: NounForms) -> str:
    return language if language in forms else "en"


def _round_half_up(numerator: int, denominator: int) -> int:
    return (numerator + denominator // 2) // denominator
