"""Every owner-facing text exists in English and Russian, with the same fields (R32)."""

from __future__ import annotations

import re
import string
from pathlib import Path

import pytest

from domain.owner_book import RefusalCode
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
