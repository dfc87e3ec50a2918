"""A question outcome's choices (R49) reach every place an outcome is shown: the finalizer's input, the outcome
text in the owner's language, the live lines; bounded like every payload (R36). The store, the read commands, the
API and the workflow have their own tests (tests/store, tests/e2e/test_api.py, tests/workflows)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter

from contracts.core_api import (
    MAX_CHOICE_ID_CHARS,
    MAX_OPTION_LABEL_CHARS,
    MAX_QUESTION_OPTIONS,
    Action,
    QuestionChoices,
    QuestionOption,
)
from domain.book.writes import helper_start
from domain.bounds import PAYLOAD_ACTIONS_MAX, PAYLOAD_ITEM_TEXT_MAX, PAYLOAD_MAX_BYTES, PAYLOAD_TEXT_MAX
from domain.limits import Limits, Policy
from domain.messages.activities import Finalize, FollowResult, RowKey, Verdict
from domain.outcome import OutcomeKind, compose_outcome_text
from domain.requests import HelperRequest
from domain.rows import HelperView, RowState
from domain.run.ending import Step, Trigger
from domain.run.helper_run import apply_step, begin_running, finalize, new_run, take
from starter.watch import LiveLines

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
VENUES = QuestionChoices(
    question_id="venue",
    options=[QuestionOption(id="hall-a", label="Hall A, 40 seats"), QuestionOption(id="roof", label="The roof")],
    free_text=True,
)


def widest_choices() -> QuestionChoices:
    """The largest choices the contract lets through: ten options of 200 four-byte characters, ids of 64."""
    return QuestionChoices(
        question_id="q" * MAX_CHOICE_ID_CHARS,
        options=[
            QuestionOption(id=str(n).rjust(MAX_CHOICE_ID_CHARS, "o"), label="🙂" * MAX_OPTION_LABEL_CHARS)
            for n in range(MAX_QUESTION_OPTIONS)
        ],
        free_text=True,
    )


def _ended(kind: OutcomeKind, result: FollowResult) -> Finalize:
    request = HelperRequest(owner="anna", helper_id="h1", task="task", model="m")
    start = helper_start(Policy(), request, seq=3, limits=Limits(), slot_granted=True)
    run = new_run(start)
    begin_running(run)
    take(run, Trigger.OPENED, session_id="s-1")
    apply_step(run, Step(follow=True))
    return finalize(run, kind, "", result, T0)


def test_a_question_outcome_carries_the_follows_choices_to_the_finalizer() -> None:
    """R49: the finalizer gets the choices of the question the helper ended with, whole."""
    asked = FollowResult(verdict=Verdict.QUESTION, question="Which venue?", choices=VENUES)
    final = _ended(OutcomeKind.QUESTION, asked)
    assert (final.question, final.choices) == ("Which venue?", VENUES)


@pytest.mark.parametrize("kind", [k for k in OutcomeKind if k is not OutcomeKind.QUESTION])
def test_every_other_outcome_carries_no_choices(kind: OutcomeKind) -> None:
    """A helper whose last follow saw a question but that ended otherwise (closed, at the hard ceiling) offers
    nothing to choose from."""
    asked = FollowResult(verdict=Verdict.QUESTION, question="Which venue?", choices=VENUES)
    assert _ended(kind, asked).choices is None


def test_the_finalizer_input_with_the_widest_choices_stays_small() -> None:
    """R36: the largest choices beside every other field of the finalizer's input at its worst stay under the cap."""
    action = Action(tool="t" * PAYLOAD_ITEM_TEXT_MAX, whom="w" * PAYLOAD_ITEM_TEXT_MAX, what="я" * 300, at=T0)
    final = Finalize(
        row=RowKey(owner="o" * 64, helper_id="h" * 64, seq=1, generation=9),
        kind=OutcomeKind.QUESTION,
        state=RowState.UNREPORTED,
        language="en",
        model="m" * 100,
        explanation="e" * 2_000,
        session_id="s-1",
        question="я" * PAYLOAD_TEXT_MAX,
        choices=widest_choices(),
        actions=[action] * PAYLOAD_ACTIONS_MAX,
        actions_total=10_000,
        refusals=["r" * PAYLOAD_ITEM_TEXT_MAX] * 20,
        summary_max=1_500,
        finished_at=T0,
    )
    payloads = pydantic_data_converter.payload_converter.to_payloads([final])
    assert sum(payload.ByteSize() for payload in payloads) < PAYLOAD_MAX_BYTES


@pytest.mark.parametrize(
    ("language", "expected"),
    [
        (
            "en",
            "The helper needs an answer: Which venue?\n\n"
            "Options to choose from:\n- Hall A, 40 seats\n- The roof\nOr answer in your own words.\n\n"
            "Two venues are free on Friday.",
        ),
        (
            "ru",
            "Помощнику нужен ответ: Which venue?\n\n"
            "Варианты ответа:\n- Hall A, 40 seats\n- The roof\nИли ответьте своими словами.\n\n"
            "Two venues are free on Friday.",
        ),
    ],
)
def test_the_outcome_text_lists_the_options_after_the_question(language: str, expected: str) -> None:
    """R32, R49: the options follow the question in the owner's language, before the core's message, so the
    summary the chat reads carries them."""
    text = compose_outcome_text(
        kind=OutcomeKind.QUESTION,
        language=language,
        message="Two venues are free on Friday.",
        question="Which venue?",
        choices=VENUES,
    )
    assert text == expected


def test_a_plain_text_question_and_a_free_text_only_one_read_as_before() -> None:
    """A question without options (plain text, or only a free-text answer) lists nothing more than its text."""
    plain = compose_outcome_text(kind=OutcomeKind.QUESTION, language="en", message="", question="Which venue?")
    free = QuestionChoices(question_id="venue", free_text=True)
    assert plain == "The helper needs an answer: Which venue?"
    assert plain == compose_outcome_text(
        kind=OutcomeKind.QUESTION, language="en", message="", question="Which venue?", choices=free
    )


def _view(state: RowState, **fields: Any) -> HelperView:
    base: dict[str, Any] = {
        "helper_id": "pick-venue",
        "state": state,
        "steps": 2,
        "work_tokens": 0,
        "input_tokens": 0,
        "model": "scripted",
        "admitted_at": T0,
        "result_dir": "/tmp/r",
    }
    return HelperView.model_validate({**base, **fields})


def test_the_live_line_of_a_question_outcome_says_its_options_and_carries_them() -> None:
    """R49: the line that reports a question outcome carries its choices (a page offers them from it) and the lines
    under it name each option; a later state change carries nothing more."""
    live = LiveLines()
    live.update("anna", [_view(RowState.RUNNING)])
    asked = _view(
        RowState.UNREPORTED,
        outcome_kind=OutcomeKind.QUESTION,
        summary="The helper needs an answer: Which venue?\n\nOptions to choose from:",
        choices=VENUES,
    )
    lines = live.update("anna", [asked])
    assert [line.text for line in lines] == [
        "unreported · outcome question: The helper needs an answer: Which venue?",
        "  option hall-a · Hall A, 40 seats",
        "  option roof · The roof",
        "  or an answer in the owner's own words",
    ]
    assert [line.choices for line in lines] == [VENUES, None, None, None]
    delivered = live.update("anna", [asked.model_copy(update={"state": RowState.DELIVERED})])
    assert [line.choices for line in delivered] == [None]


def test_a_fresh_watch_of_an_open_question_shows_its_options() -> None:
    """A watch that starts after the outcome (a page redrawn) still gets the question with its choices."""
    asked = _view(RowState.UNREPORTED, outcome_kind=OutcomeKind.QUESTION, summary="Which venue?", choices=VENUES)
    lines = LiveLines().update("anna", [asked])
    assert lines[0].choices == VENUES and lines[1].text == "  option hall-a · Hall A, 40 seats"


def test_a_plain_text_question_shows_as_before() -> None:
    """A question without options (plain text, or only a free-text answer) is its headline alone; the free-text only
    one carries its choices all the same, for its id."""
    plain = _view(RowState.UNREPORTED, outcome_kind=OutcomeKind.QUESTION, summary="Which venue?")
    lines = LiveLines().update("anna", [plain])
    assert [(line.text, line.choices) for line in lines] == [("unreported · outcome question: Which venue?", None)]
    free = QuestionChoices(question_id="venue", free_text=True)
    lines = LiveLines().update("anna", [plain.model_copy(update={"choices": free})])
    assert [(line.text, line.choices) for line in lines] == [("unreported · outcome question: Which venue?", free)]
