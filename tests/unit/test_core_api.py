"""The core's contract as models: what the runtime refuses and what it cleans in a core's answer (R37)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from contracts.core_api import (
    MAX_CHOICE_ID_CHARS,
    MAX_INPUT_TOKENS_TOTAL,
    MAX_OPTION_LABEL_CHARS,
    MAX_QUESTION_OPTIONS,
    MAX_SESSION_ID_CHARS,
    MAX_SNAPSHOT_STEPS,
    MAX_STEP_INDEX,
    MAX_STEP_TOKENS,
    Action,
    Authorization,
    QuestionChoices,
    SessionCreated,
    SessionOutcome,
    SessionStatus,
    Snapshot,
    StepUsage,
    strip_control_characters,
)

NOISE = "\x00\x01\x07\x08\x0b\x0c\x0e\x1b\x1f\x7f\ud800\udfff"


def snapshot(**fields: Any) -> Snapshot:
    return Snapshot.model_validate({"session_id": "s-1", "status": "running", "input_tokens_total": 0, **fields})


def step(**fields: Any) -> dict[str, Any]:
    return {"index": 1, "input_tokens": 10, "output_tokens": 1, **fields}


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("plain text", "plain text"),
        ("line one\nline two\r\n\tindented", "line one\nline two\r\n\tindented"),
        (f"a{NOISE}b", "ab"),
        ("\x00", ""),
        ("Привет,\x00 мир 🙂", "Привет, мир 🙂"),
        ("\x80\x9f\u2028 stay", "\x80\x9f\u2028 stay"),  # only C0, DEL and lone surrogates go
    ],
)
def test_control_characters_are_stripped_from_core_text(raw: str, clean: str) -> None:
    """R37: NUL, the other C0 controls (but tab, newline, carriage return), DEL and lone surrogates are
    stripped; everything else, other scripts and emoji included, stays as the core wrote it."""
    assert strip_control_characters(raw) == clean


def test_every_text_of_a_snapshot_is_cleaned_when_read() -> None:
    """R37: last message, question, authorization, refusals, actions, outcome and error lose their control
    characters when a snapshot is read, before anything can use or store them."""
    dirty = snapshot(
        last_message=f"last{NOISE} message",
        question="which\x00 one?",
        authorization={"action": f"send_mail\x00{NOISE}", "reason": "needs\x1b[31m approval"},
        refusals=[f"refused\x00 {NOISE}x"],
        actions=[
            {"tool": "send\x00_mail", "whom": "bob\x07@example.com", "what": "sent\x7f", "at": "2026-11-29T19:41:57Z"}
        ],
        outcome={"kind": "completed", "text": f"done\x00{NOISE}.", "stop_reason": None},
        error="bad\x00 thing",
    )
    assert dirty.last_message == "last message"
    assert dirty.question == "which one?"
    assert dirty.authorization == Authorization(action="send_mail", reason="needs[31m approval")
    assert dirty.refusals == ["refused x"]
    assert (dirty.actions[0].tool, dirty.actions[0].whom, dirty.actions[0].what) == (
        "send_mail",
        "bob@example.com",
        "sent",
    )
    assert dirty.outcome is not None and dirty.outcome.text == "done."
    assert dirty.error == "bad thing"
    assert "\x00" not in dirty.model_dump_json()


@pytest.mark.parametrize(
    "session_id",
    ["", "s-\x00", "s-1\n", "s\x7f1", "s-\u200b1", " s-1", "s-1 ", "x" * (MAX_SESSION_ID_CHARS + 1)],
)
def test_a_session_id_with_control_characters_or_overlong_is_malformed(session_id: str) -> None:
    """R37: an identifier the core made up is never cleaned, it is refused: empty, unprintable, padded or
    longer than 200 characters makes the snapshot or the create answer malformed."""
    with pytest.raises(ValidationError):
        snapshot(session_id=session_id)
    with pytest.raises(ValidationError):
        SessionCreated.model_validate({"session_id": session_id, "created": True})


def test_ordinary_session_ids_are_accepted() -> None:
    """R37: the reference core's and other cores' ids pass unchanged, up to 200 printable characters."""
    for session_id in ("s-0f3c9a4be1d24c6f9d8e7a6b5c4d3e2f", "fake-1", "sess_Ä-42", "x" * MAX_SESSION_ID_CHARS):
        assert snapshot(session_id=session_id).session_id == session_id


@pytest.mark.parametrize(
    "fields",
    [
        {"steps": [step(output_tokens=2**64 - 5)]},
        {"steps": [step(input_tokens=MAX_STEP_TOKENS + 1)]},
        {"steps": [step(cached_input_tokens=MAX_STEP_TOKENS + 1)]},
        {"steps": [step(output_tokens=-1)]},
        {"steps": [step(index=0)]},
        {"steps": [step(index=MAX_STEP_INDEX + 1)]},
        {"steps": [step(index=n) for n in range(1, MAX_SNAPSHOT_STEPS + 2)]},
        {"input_tokens_total": MAX_INPUT_TOKENS_TOTAL + 1},
        {"input_tokens_total": 2**64 - 5},
        {"input_tokens_total": -1},
        {"input_tokens_total": 1.5},
    ],
    ids=[
        "output-2^64-5",
        "input-over-1e9",
        "cached-over-1e9",
        "negative-output",
        "index-0",
        "index-over-100000",
        "10001-steps",
        "total-over-1e12",
        "total-2^64-5",
        "negative-total",
        "fractional-total",
    ],
)
def test_counters_out_of_range_make_the_snapshot_malformed(fields: dict[str, Any]) -> None:
    """R37: token counts per step above 10^9, step indices outside 1..100,000, more than 10,000 steps and a
    cumulative input above 10^12 are no core's real numbers (2^64 - 5 is an unsigned underflow): refused."""
    with pytest.raises(ValidationError):
        snapshot(**fields)


def test_counters_at_their_bounds_are_accepted() -> None:
    """R37: the bounds are inclusive, and every counter within them still fits the store's BIGINT columns,
    also summed into the work counter."""
    steps = [
        step(index=n, input_tokens=MAX_STEP_TOKENS, cached_input_tokens=MAX_STEP_TOKENS, output_tokens=MAX_STEP_TOKENS)
        for n in range(MAX_STEP_INDEX - MAX_SNAPSHOT_STEPS + 1, MAX_STEP_INDEX + 1)
    ]
    accepted = snapshot(steps=steps, input_tokens_total=MAX_INPUT_TOKENS_TOTAL)
    assert len(accepted.steps) == MAX_SNAPSHOT_STEPS
    assert MAX_SNAPSHOT_STEPS * 2 * MAX_STEP_TOKENS < 2**63 - 1


def test_the_models_still_build_what_the_reference_core_builds() -> None:
    """R11, R37: the reference core makes its answers from these models; ordinary values pass unchanged."""
    usage = StepUsage(index=80, input_tokens=3_999_000, cached_input_tokens=2_000_000, output_tokens=4_000)
    outcome = SessionOutcome(kind=SessionStatus.PARTIAL, text="Stopped at 80 steps.\n\nLast message:\n…")
    action = Action.model_validate(
        {"tool": "send_mail", "whom": "bob@example.com", "what": "sent 'Q3'", "at": "2026-11-29T19:41:57Z"}
    )
    built = Snapshot(
        session_id="s-0f3c", status=SessionStatus.PARTIAL, steps=[usage], input_tokens_total=3_999_000, outcome=outcome
    )
    built.actions.append(action)
    again = Snapshot.model_validate_json(built.model_dump_json())
    assert again == built


def options(count: int) -> list[dict[str, str]]:
    return [{"id": f"o{n}", "label": f"Option {n}"} for n in range(1, count + 1)]


def asked(choices: dict[str, Any], **fields: Any) -> Snapshot:
    return snapshot(status="question", question="Walk or taxi?", choices=choices, **fields)


def test_a_structured_question_is_read_as_sent_and_a_plain_one_stays_valid() -> None:
    """R49: a question's id, options (up to ten, labels up to 200 characters, ids up to 64) and free-text rule
    are read as the core sent them, labels cleaned like every core text; a plain-text question has no choices."""
    widest = options(MAX_QUESTION_OPTIONS)
    widest[0] = {"id": "i" * MAX_CHOICE_ID_CHARS, "label": "Л" * MAX_OPTION_LABEL_CHARS}
    read = asked({"question_id": "q-1", "options": widest, "free_text": True})
    assert read.choices is not None and read.choices.question_id == "q-1" and read.choices.free_text
    assert [option.id for option in read.choices.options] == ["i" * MAX_CHOICE_ID_CHARS] + [
        f"o{n}" for n in range(2, MAX_QUESTION_OPTIONS + 1)
    ]
    dirty = asked({"question_id": "q-1", "options": [{"id": "walk", "label": "Walk\x00ing\x1b distance"}]})
    assert dirty.choices is not None and dirty.choices.options[0].label == "Walking distance"
    assert not dirty.choices.free_text  # free text is taken only when the core says so
    words_only = asked({"question_id": "q-2", "free_text": True})
    assert words_only.choices == QuestionChoices(question_id="q-2", free_text=True)
    assert snapshot(status="question", question="Which week?").choices is None


@pytest.mark.parametrize(
    "choices",
    [
        {"question_id": "q", "options": options(MAX_QUESTION_OPTIONS + 1)},
        {"question_id": "q", "options": [{"id": "a", "label": "One"}, {"id": "a", "label": "Two"}]},
        {"question_id": "q", "options": [{"id": "a", "label": "x" * (MAX_OPTION_LABEL_CHARS + 1)}]},
        {"question_id": "q", "options": [{"id": "a", "label": ""}]},
        {"question_id": "q", "options": [{"id": "a", "label": "\x00\x1b "}]},
        {"question_id": "q", "options": [{"id": "a" * (MAX_CHOICE_ID_CHARS + 1), "label": "A"}]},
        {"question_id": "q", "options": [{"id": "a\x00", "label": "A"}]},
        {"question_id": "q", "options": [{"id": " a", "label": "A"}]},
        {"question_id": "q" * (MAX_CHOICE_ID_CHARS + 1), "options": options(2)},
        {"question_id": "q\n1", "options": options(2)},
        {"question_id": "", "options": options(2)},
        {"options": options(2)},
        {"question_id": "q"},
        {"question_id": "q", "options": [], "free_text": False},
        {"question_id": "q", "options": options(2), "free_text": "sometimes"},
    ],
    ids=[
        "11-options",
        "duplicate-option-ids",
        "overlong-label",
        "empty-label",
        "label-blank-once-cleaned",
        "overlong-option-id",
        "option-id-with-nul",
        "option-id-padded",
        "overlong-question-id",
        "question-id-with-newline",
        "empty-question-id",
        "no-question-id",
        "nothing-to-answer-with",
        "no-options-no-free-text",
        "free-text-not-a-bool",
    ],
)
def test_choices_out_of_their_bounds_make_the_snapshot_malformed(choices: dict[str, Any]) -> None:
    """R49, R37: more than ten options, two options with one id, a label over 200 characters or blank, an id over
    64 characters or unprintable, and a question nobody could answer are no sane core's: the snapshot is refused,
    whatever its status."""
    with pytest.raises(ValidationError):
        asked(choices)
    with pytest.raises(ValidationError):
        snapshot(status="running", question="Walk or taxi?", choices=choices)


def test_choices_without_a_question_text_make_the_snapshot_malformed() -> None:
    """R49, R37: choices come with the question they answer; a snapshot with choices and no question text (or an
    empty one) is refused."""
    choices = {"question_id": "q-1", "options": options(2)}
    for question in (None, ""):
        with pytest.raises(ValidationError, match="choices come with the question"):
            snapshot(status="question", question=question, choices=choices)


def test_choices_with_another_status_are_still_the_contracts_shape() -> None:
    """R49: a pause cancelled keeps what it asked: choices with a status other than `question` are valid (and not
    read by the runtime)."""
    kept = snapshot(status="cancelled", question="Walk or taxi?", choices={"question_id": "q-1", "options": options(2)})
    assert kept.choices is not None and kept.choices.question_id == "q-1"
