"""Every owner-facing text exists in English and Russian, with the same fields (R32)."""

from __future__ import annotations

import re
import string
from pathlib import Path

import pytest

from domain.book import RefusalCode
from domain.durations import TOKENS, say_count, say_duration
from domain.texts import SUPPORTED_LANGUAGES, keys, text, variants

ROOT = Path(__file__).resolve().parents[2]
CYRILLIC = re.compile("[\u0400-\u04ff]")
LITERAL_KEY = re.compile(r"\b_?text\(\s*\"([a-z_.]+)\"")


def placeholders(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


def test_supported_languages_are_english_and_russian() -> None:
    """R32: English and Russian at least."""
    assert {"en", "ru"} <= set(SUPPORTED_LANGUAGES)


def test_there_are_texts() -> None:
    """R32: the catalogue is not empty (the parametrized checks below would pass vacuously)."""
    assert len(keys()) >= 15


@pytest.mark.parametrize("key", keys())
def test_every_key_exists_in_every_language(key: str) -> None:
    """R32: every text has an English and a Russian variant, nonempty."""
    found = variants(key)
    for language in SUPPORTED_LANGUAGES:
        assert found.get(language, "").strip(), f"{key} has no {language} text"


@pytest.mark.parametrize("key", keys())
def test_variants_use_the_same_fields(key: str) -> None:
    """R32: a caller's fields fit every language: the placeholders are the same."""
    found = variants(key)
    assert placeholders(found["ru"]) == placeholders(found["en"]), key


@pytest.mark.parametrize("key", keys())
@pytest.mark.parametrize("language", SUPPORTED_LANGUAGES)
def test_every_text_formats_with_its_fields(key: str, language: str) -> None:
    """R32: formatting with exactly the fields a text uses works and leaves no braces."""
    fields = {name: f"<{name}>" for name in placeholders(variants(key)[language])}
    formatted = text(key, language, **fields)
    for value in fields.values():
        assert value in formatted
    assert "{" not in formatted and "}" not in formatted


@pytest.mark.parametrize("key", keys())
def test_russian_is_russian_and_english_is_not(key: str) -> None:
    """R32: the Russian variant is actually written in Cyrillic; the English one has none."""
    found = variants(key)
    assert CYRILLIC.search(found["ru"]), f"{key}: the Russian text has no Cyrillic"
    assert not CYRILLIC.search(found["en"]), f"{key}: the English text has Cyrillic"
    assert found["ru"] != found["en"]


def test_unknown_language_falls_back_to_english() -> None:
    """R32: internal callers with an unknown language get English (requests are refused earlier)."""
    assert text("stop.no_message", "fr") == text("stop.no_message", "en")


def test_missing_field_is_an_error() -> None:
    """R32: a text is never written with an unfilled placeholder."""
    with pytest.raises(KeyError):
        text("outcome.question", "en")


def test_every_refusal_of_admission_has_a_text() -> None:
    """R2, R3, R32: the admission refusals are looked up as `refused.<code>`; each one exists."""
    for code in (
        RefusalCode.TOO_MANY_OPEN,
        RefusalCode.GOAL_NEEDS_OPEN_PLACE,
        RefusalCode.ROWS_FULL,
        RefusalCode.GOAL_NEEDS_ROW_PLACE,
        RefusalCode.UNKNOWN_HELPER,
        RefusalCode.NOT_UNREPORTED,
    ):
        assert f"refused.{code.value}" in keys()


def test_every_key_the_runtime_uses_exists() -> None:
    """R32: each literal key passed to the runtime's text lookup (domain, workflows, activities) is defined."""
    used: dict[str, str] = {}
    for folder in ("domain", "workflows", "activities"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            if "domain.texts" not in source:
                continue
            for key in LITERAL_KEY.findall(source):
                used.setdefault(key, str(path.relative_to(ROOT)))
    assert "outcome.question" in used, "the scan found the runtime's lookups"
    missing = {key: where for key, where in used.items() if key not in keys()}
    assert not missing


# The fields each text takes. Callers (workflows/helper.py, domain/outcome.py, domain/owner_book.py,
# activities/chat.py) pass exactly these; a change here is a change of their contract.
FIELDS: dict[str, set[str]] = {
    "refused.too_many_open": {"helper_id", "max_open", "open_ids"},
    "refused.goal_needs_open_place": {"helper_id", "open_ids"},
    "refused.rows_full": {"helper_id", "max_rows"},
    "refused.goal_needs_row_place": {"helper_id"},
    "refused.wrong_owner": {"owner", "asked"},
    "refused.unknown_helper": {"helper_id"},
    "refused.not_unreported": {"helper_id"},
    "refused.follow_up_still_open": {"earlier"},
    "refused.follow_up_kind": {"earlier"},
    "refused.follow_up_closed": {"earlier"},
    "refused.follow_up_gone": {"earlier", "follow_up"},
    "follow_up.task": {"earlier", "ended_with", "context", "answer"},
    "follow_up.context_gone": {"earlier", "answer"},
    "follow_up.context_cut": set(),
    "follow_up.ended_with.question": set(),
    "follow_up.ended_with.authorization": set(),
    "follow_up.ended_with.partial": set(),
    "outcome.follows_up": {"earlier"},
    "stop.work_ceiling": {"ceiling"},
    "stop.deadline": {"deadline"},
    "stop.hard_ceiling": {"grace", "deadline"},
    "stop.close_unconfirmed": set(),
    "stop.no_message": set(),
    "outcome.question": {"question"},
    "outcome.options_heading": set(),
    "outcome.free_text": set(),
    "outcome.authorization": {"needed"},
    "outcome.interrupted": {"reason"},
    "outcome.failed": {"reason"},
    "outcome.closed": set(),
    "outcome.core_unreachable": set(),
    "outcome.actions_heading": set(),
    "summary.cut_mark": set(),
    "event.ready": {"helper_ids"},
    "reason.turn_interrupted": set(),
    "reason.session_lost": set(),
    "reason.core_no_answer_start": set(),
    "reason.core_rejected": set(),
    "reason.core_unreachable": set(),
    "reason.core_bad_answers": set(),
    "reason.core_silent": {"duration"},
    "reason.core_failed": set(),
    "reason.core_failed_detail": {"detail"},
    "refused.answer_nothing_asked": {"helper_id"},
    "refused.answer_closed": {"helper_id"},
    "refused.answer_followed_up": {"helper_id", "follow_up"},
    "refused.answer_stale": {"helper_id", "question_id", "asked"},
    "refused.answer_stale_answered": {"helper_id", "question_id", "asked"},
    "refused.answer_before_asked": {"helper_id"},
    "refused.answer_not_offered": {"helper_id", "option_id", "options"},
    "refused.answer_no_free_text": {"helper_id", "options"},
    "refused.answer_grant_or_deny": {"helper_id"},
    "refused.grant_unparsed": {"helper_id", "why"},
    "refused.grant_widens": {"helper_id", "asked", "wider"},
    "outcome.granted": {"action", "asked"},
    "refused.answer_id_taken": {"helper_id", "follow_up"},
    "answer.task.option": {"question_id", "label"},
    "answer.task.text": {"question_id", "answer"},
    "answer.task.grant": {"item"},
    "refused.answer_expired": {"helper_id", "at"},
    "refused.answer_wait_ended": {"helper_id", "at", "how"},
    "wait_ended.answered": set(),
    "wait_ended.granted": set(),
    "wait_ended.denied": set(),
    "wait_ended.closed": set(),
    "wait_ended.followed_up": set(),
    "wait_ended.removed": set(),
    "event.reminder.question": {"helper_ids", "about"},
    "event.reminder.authorization": {"helper_ids", "about"},
    "event.expired.question": {"helper_ids", "about"},
    "event.expired.authorization": {"helper_ids", "about"},
    "follow_up.ended_with.question.expired": set(),
    "follow_up.ended_with.authorization.expired": set(),
}


def test_the_catalogue_is_exactly_the_documented_one() -> None:
    """R32: every key, and the fields it takes, are the ones its callers are written against."""
    assert set(keys()) == set(FIELDS)
    for key, fields in FIELDS.items():
        for language in SUPPORTED_LANGUAGES:
            assert placeholders(variants(key)[language]) == fields, (key, language)


# Fragments of machinery that must never reach the owner: HTTP, paths, status codes, session ids.
MACHINERY = re.compile(r"\b(GET|POST|PUT|DELETE|HTTP|ms|\d{3})\b|/v1/|\bs-\d|_|\bcore refused \(")


@pytest.mark.parametrize("key", keys())
@pytest.mark.parametrize("language", SUPPORTED_LANGUAGES)
def test_no_text_speaks_machinery(key: str, language: str) -> None:
    """R32: the texts themselves carry no HTTP verbs, paths, status codes or identifiers."""
    template = variants(key)[language]
    literal = "".join(part for part, _, _, _ in string.Formatter().parse(template))
    assert not MACHINERY.search(literal), (key, language, literal)


@pytest.mark.parametrize("key", [key for key in keys() if key.startswith("reason.")])
@pytest.mark.parametrize("language", SUPPORTED_LANGUAGES)
def test_reasons_fit_into_the_failure_and_interruption_texts(key: str, language: str) -> None:
    """R32: a reason is a lower-case clause without a final period, made to follow "failed:"."""
    fields = {name: "30 seconds" for name in placeholders(variants(key)[language])}
    reason = text(key, language, **fields)
    assert reason[0].islower() and not reason.endswith(".")
    assert text("outcome.failed", language, reason=reason).endswith(reason)
    interrupted = text("outcome.interrupted", language, reason=reason)
    assert f": {reason}. " in interrupted


@pytest.mark.parametrize(
    ("language", "deadline", "expected"),
    [
        ("en", 30_000, "Stopped at the deadline of 30 seconds; this is a partial outcome."),
        ("en", 90_000, "Stopped at the deadline of 1.5 minutes; this is a partial outcome."),
        ("en", 2_700_000, "Stopped at the deadline of 45 minutes; this is a partial outcome."),
        ("ru", 30_000, "Остановлено по истечении срока (30 секунд); это частичный результат."),
        ("ru", 60_000, "Остановлено по истечении срока (1 минута); это частичный результат."),
        ("ru", 90_000, "Остановлено по истечении срока (1,5 минуты); это частичный результат."),
        ("ru", 2_700_000, "Остановлено по истечении срока (45 минут); это частичный результат."),
    ],
)
def test_deadline_is_said_as_the_owner_would(language: str, deadline: int, expected: str) -> None:
    """R15, R32: the deadline stop says the deadline as a person would, never "0-minute"."""
    assert text("stop.deadline", language, deadline=say_duration(deadline, language)) == expected


def test_hard_ceiling_says_both_durations() -> None:
    """R15, R32: the hard-ceiling stop says the grace and the deadline in words, in both languages."""
    english = text("stop.hard_ceiling", "en", grace=say_duration(10_000, "en"), deadline=say_duration(30_000, "en"))
    assert english == (
        "The core did not finish within 10 seconds after the deadline of 30 seconds; "
        "this outcome is the last completed message."
    )
    russian = text("stop.hard_ceiling", "ru", grace=say_duration(120_000, "ru"), deadline=say_duration(2_700_000, "ru"))
    assert russian.startswith("Срок (45 минут) истёк, и ядро не завершило работу за дополнительное время (2 минуты);")


def test_work_ceiling_is_said_with_its_noun_and_the_wrap_up_that_may_pass_it() -> None:
    """R13, R32: the work ceiling reads "1,000,000 tokens", and in Russian with no comma in the number; the text says
    that the calls that wrap up the work may go past it, so usage above the ceiling beside it is no contradiction."""
    assert text("stop.work_ceiling", "en", ceiling=say_count(1_000_000, "en", TOKENS)) == (
        "Stopped at the work ceiling of 1,000,000 tokens (the calls that wrap up may go past it); "
        "this is a partial outcome."
    )
    russian = text("stop.work_ceiling", "ru", ceiling=say_count(1_000_000, "ru", TOKENS))
    assert russian == (
        "Остановлено на пределе работы в 1\u00a0000\u00a0000 токенов (завершающие вызовы могут его превысить); "
        "это частичный результат."
    )
