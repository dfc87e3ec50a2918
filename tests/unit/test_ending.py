"""The helper's ending table, row by row (R7, R13, R15-R17, R21, R24, R35, R38)."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.core_api import SessionStatus
from domain.book.writes import helper_start
from domain.limits import Limits, Policy
from domain.messages.activities import Verdict
from domain.outcome import OutcomeKind
from domain.requests import HelperRequest
from domain.rows import RowState
from domain.run.ending import (
    CLOSED,
    Ending,
    Explanation,
    FinishReason,
    Step,
    Trigger,
    decide,
    row_state_of,
)
from domain.run.ending_texts import explain
from domain.run.helper_run import HelperRun

REQUEST = HelperRequest(owner="anna", helper_id="h1", task="task", model="m")
START = helper_start(Policy(), REQUEST, seq=1, limits=Limits(), slot_granted=True)
# The situations the table tells apart, as the helper's run holds them.
OPENING = HelperRun(start=START)
FOLLOWING = HelperRun(start=START, session_id="s-1")
CLOSING = HelperRun(start=START, session_id="s-1", closing=True)
CLOSING_WHILE_OPENING = HelperRun(start=START, closing=True)
AUTH_STOP = HelperRun(start=START, session_id="s-1", stopping_for_authorization=True)
AFTER_DEADLINE = HelperRun(start=START, session_id="s-1", finish_reason=FinishReason.DEADLINE)
AFTER_CEILING = HelperRun(start=START, session_id="s-1", finish_reason=FinishReason.WORK_CEILING)


def ends(kind: OutcomeKind, explanation: Explanation = Explanation.NONE) -> Step:
    return Step(end=Ending(kind, explanation))


ROWS: list[tuple[str, Trigger, HelperRun, dict[str, object], Step]] = [
    # The hard ceiling ends everything, whatever is in flight (R15, R35).
    (
        "ceiling while following",
        Trigger.HARD_CEILING,
        FOLLOWING,
        {},
        ends(OutcomeKind.PARTIAL, Explanation.HARD_CEILING),
    ),
    (
        "ceiling after finish-now",
        Trigger.HARD_CEILING,
        AFTER_DEADLINE,
        {},
        ends(OutcomeKind.PARTIAL, Explanation.HARD_CEILING),
    ),
    ("ceiling while closing", Trigger.HARD_CEILING, CLOSING, {}, Step(end=CLOSED)),
    ("ceiling, create unanswered", Trigger.HARD_CEILING, OPENING, {}, ends(OutcomeKind.FAILED, Explanation.NO_START)),
    ("ceiling, closed while opening", Trigger.HARD_CEILING, CLOSING_WHILE_OPENING, {}, Step(end=CLOSED)),
    ("ceiling during authorization cleanup", Trigger.HARD_CEILING, AUTH_STOP, {}, ends(OutcomeKind.AUTHORIZATION)),
    # Close: the row closes at once, the cancel runs beside the follow; the slot waits (R7, R21).
    ("close while following", Trigger.CLOSE, FOLLOWING, {}, Step(close_row=True, cancel=True)),
    ("close while opening", Trigger.CLOSE, OPENING, {}, Step(close_row=True, cancel=False)),
    ("close again", Trigger.CLOSE, CLOSING, {}, Step()),
    # Deadline: finish-now beside the follow, once (R15).
    ("deadline", Trigger.DEADLINE, FOLLOWING, {}, Step(finish=FinishReason.DEADLINE)),
    ("deadline after work ceiling", Trigger.DEADLINE, AFTER_CEILING, {}, Step()),
    ("deadline while closing", Trigger.DEADLINE, CLOSING, {}, Step()),
    ("deadline while opening", Trigger.DEADLINE, OPENING, {}, Step()),
    ("deadline during authorization cleanup", Trigger.DEADLINE, AUTH_STOP, {}, Step()),
    # The create's answer.
    ("opened", Trigger.OPENED, FOLLOWING, {}, Step(follow=True)),
    (
        "opened after the deadline",
        Trigger.OPENED,
        FOLLOWING,
        {"deadline_passed": True},
        Step(follow=True, finish=FinishReason.DEADLINE),
    ),
    ("opened after a close", Trigger.OPENED, CLOSING, {"deadline_passed": True}, Step(follow=True, cancel=True)),
    ("open refused", Trigger.OPEN_FAILED, OPENING, {}, ends(OutcomeKind.FAILED, Explanation.CORE_REJECTED)),
    ("open refused while closing", Trigger.OPEN_FAILED, CLOSING_WHILE_OPENING, {}, Step(end=CLOSED)),
    # The follow's verdicts.
    (
        "completed",
        Trigger.FOLLOW,
        FOLLOWING,
        {"verdict": Verdict.TERMINAL, "status": SessionStatus.COMPLETED},
        ends(OutcomeKind.COMPLETED),
    ),
    (
        "completed while closing",
        Trigger.FOLLOW,
        CLOSING,
        {"verdict": Verdict.TERMINAL, "status": SessionStatus.COMPLETED},
        Step(end=CLOSED),
    ),
    (
        "partial by the core's ceiling",
        Trigger.FOLLOW,
        FOLLOWING,
        {"verdict": Verdict.TERMINAL, "status": SessionStatus.PARTIAL},
        ends(OutcomeKind.PARTIAL),
    ),
    (
        "partial after deadline",
        Trigger.FOLLOW,
        AFTER_DEADLINE,
        {"verdict": Verdict.TERMINAL, "status": SessionStatus.PARTIAL},
        ends(OutcomeKind.PARTIAL, Explanation.DEADLINE),
    ),
    (
        "partial after work ceiling",
        Trigger.FOLLOW,
        AFTER_CEILING,
        {"verdict": Verdict.TERMINAL, "status": SessionStatus.PARTIAL},
        ends(OutcomeKind.PARTIAL, Explanation.WORK_CEILING),
    ),
    (
        "failed turn",
        Trigger.FOLLOW,
        FOLLOWING,
        {"verdict": Verdict.TERMINAL, "status": SessionStatus.FAILED},
        ends(OutcomeKind.FAILED),
    ),
    (
        "cancelled by someone else",
        Trigger.FOLLOW,
        FOLLOWING,
        {"verdict": Verdict.TERMINAL, "status": SessionStatus.CANCELLED},
        ends(OutcomeKind.INTERRUPTED, Explanation.TURN_INTERRUPTED),
    ),
    (
        "interrupted by a core restart",
        Trigger.FOLLOW,
        FOLLOWING,
        {"verdict": Verdict.TERMINAL, "status": SessionStatus.INTERRUPTED},
        ends(OutcomeKind.INTERRUPTED, Explanation.TURN_INTERRUPTED),
    ),
    (
        "cancelled for authorization",
        Trigger.FOLLOW,
        AUTH_STOP,
        {"verdict": Verdict.TERMINAL, "status": SessionStatus.CANCELLED},
        ends(OutcomeKind.AUTHORIZATION),
    ),
    ("question", Trigger.FOLLOW, FOLLOWING, {"verdict": Verdict.QUESTION}, ends(OutcomeKind.QUESTION)),
    ("question while closing", Trigger.FOLLOW, CLOSING, {"verdict": Verdict.QUESTION}, Step(end=CLOSED)),
    (
        "authorization: cleanup cancel beside the follow",
        Trigger.FOLLOW,
        FOLLOWING,
        {"verdict": Verdict.AUTHORIZATION},
        Step(cancel=True, follow=True, watch_work_ceiling=False, stop_at_pauses=False, stopping_for_authorization=True),
    ),
    (
        "authorization while closing",
        Trigger.FOLLOW,
        CLOSING,
        {"verdict": Verdict.AUTHORIZATION},
        Step(follow=True, watch_work_ceiling=False, stop_at_pauses=False),
    ),
    (
        "work ceiling",
        Trigger.FOLLOW,
        FOLLOWING,
        {"verdict": Verdict.WORK_CEILING},
        Step(finish=FinishReason.WORK_CEILING, follow=True, watch_work_ceiling=False),
    ),
    (
        "work ceiling after the deadline",
        Trigger.FOLLOW,
        AFTER_DEADLINE,
        {"verdict": Verdict.WORK_CEILING},
        Step(follow=True, watch_work_ceiling=False),
    ),
    (
        "session lost",
        Trigger.FOLLOW,
        FOLLOWING,
        {"verdict": Verdict.LOST},
        ends(OutcomeKind.INTERRUPTED, Explanation.SESSION_LOST),
    ),
    ("session lost while closing", Trigger.FOLLOW, CLOSING, {"verdict": Verdict.LOST}, Step(end=CLOSED)),
    (
        "core babbling",
        Trigger.FOLLOW,
        FOLLOWING,
        {"verdict": Verdict.CORE_FAILED},
        ends(OutcomeKind.FAILED, Explanation.CORE_BAD_ANSWERS),
    ),
    (
        "core silent",
        Trigger.FOLLOW,
        FOLLOWING,
        {"verdict": Verdict.CORE_FAILED, "silent": True},
        ends(OutcomeKind.FAILED, Explanation.CORE_SILENT),
    ),
    ("core failing while closing", Trigger.FOLLOW, CLOSING, {"verdict": Verdict.CORE_FAILED}, Step(end=CLOSED)),
    # A cancel's answer: only a confirmed stop ends the helper (R7).
    ("close confirmed", Trigger.CANCEL_ANSWERED, CLOSING, {"stopped": True}, Step(end=CLOSED)),
    ("close not confirmed", Trigger.CANCEL_ANSWERED, CLOSING, {"stopped": False}, Step()),
    (
        "authorization cancel confirmed",
        Trigger.CANCEL_ANSWERED,
        AUTH_STOP,
        {"stopped": True},
        ends(OutcomeKind.AUTHORIZATION),
    ),
    ("authorization cancel not confirmed", Trigger.CANCEL_ANSWERED, AUTH_STOP, {"stopped": False}, Step()),
    # A finish-now's answer changes nothing: the follow sees what the core did (R15).
    ("finish-now answered", Trigger.FINISH_ANSWERED, AFTER_DEADLINE, {}, Step()),
]


@pytest.mark.parametrize(("name", "trigger", "situation", "facts", "expected"), ROWS, ids=[row[0] for row in ROWS])
def test_ending_table(name: str, trigger: Trigger, situation: HelperRun, facts: dict[str, Any], expected: Step) -> None:
    """R7, R13, R15-R17, R21, R24, R35: each trigger in each situation leads to exactly this step."""
    assert decide(trigger, situation, **facts) == expected


def ended(status: SessionStatus, situation: HelperRun) -> OutcomeKind:
    """The outcome kind of a session whose turn ended, as the follow reports it."""
    step = decide(Trigger.FOLLOW, situation, verdict=Verdict.TERMINAL, status=status)
    assert step.end is not None
    return step.end.kind


@pytest.mark.parametrize("status", list(SessionStatus))
@pytest.mark.parametrize(
    "situation", [CLOSING, CLOSING_WHILE_OPENING, CLOSING.model_copy(update={"stopping_for_authorization": True})]
)
def test_closing_wins(status: SessionStatus, situation: HelperRun) -> None:
    """R21: a helper closed by its owner ends closed, whatever the session did."""
    assert ended(status, situation) is OutcomeKind.CLOSED


@pytest.mark.parametrize("status", list(SessionStatus))
def test_stopping_for_authorization_comes_next(status: SessionStatus) -> None:
    """R17: a session cancelled because it waited for authorization ends with the authorization outcome."""
    assert ended(status, AUTH_STOP) is OutcomeKind.AUTHORIZATION


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (SessionStatus.COMPLETED, OutcomeKind.COMPLETED),
        (SessionStatus.PARTIAL, OutcomeKind.PARTIAL),
        (SessionStatus.FAILED, OutcomeKind.FAILED),
        (SessionStatus.CANCELLED, OutcomeKind.INTERRUPTED),
        (SessionStatus.INTERRUPTED, OutcomeKind.INTERRUPTED),
    ],
)
def test_status_maps_to_outcome_kind(status: SessionStatus, expected: OutcomeKind) -> None:
    """R18, R24: the ended status gives the kind; cancelled by someone else or interrupted is interrupted."""
    assert ended(status, FOLLOWING) is expected


def test_every_trigger_is_decided_in_every_situation() -> None:
    """R35: the table has an answer for every trigger in every situation, so the loop never stalls."""
    situations = [OPENING, FOLLOWING, CLOSING, CLOSING_WHILE_OPENING, AUTH_STOP, AFTER_DEADLINE, AFTER_CEILING]
    for situation in situations:
        for trigger in Trigger:
            if trigger is Trigger.FOLLOW:
                for verdict in Verdict:
                    step = decide(trigger, situation, verdict=verdict, status=SessionStatus.COMPLETED)
                    assert isinstance(step, Step)
            else:
                assert isinstance(decide(trigger, situation), Step)


def test_a_closed_ending_reports_nothing() -> None:
    """R21, R26: a closed helper's row is closed; every other outcome is unreported until told."""
    assert row_state_of(CLOSED.kind) is RowState.CLOSED
    for kind in OutcomeKind:
        if kind is not OutcomeKind.CLOSED:
            assert row_state_of(kind) is RowState.UNREPORTED


@pytest.mark.parametrize("language", ["en", "ru"])
def test_every_explanation_is_plain_words(language: str) -> None:
    """R32: every explanation is in the owner's language and free of machinery (paths, codes, ids)."""
    limits = Limits(deadline_ms=30_000, grace_ms=10_000)
    for explanation in Explanation:
        said = explain(explanation, language, limits, silence_ms=90_000)
        if explanation is Explanation.NONE:
            assert said == ""
            continue
        assert said
        for machinery in ("/v1/", "GET ", "POST ", "(4", "(5", "s-0", "{", "}"):
            assert machinery not in said, (explanation, said)


def test_durations_read_as_people_say_them() -> None:
    """R32: a 30-second deadline is "30 seconds", never "0-minute"; 90 s is "1.5 minutes"."""
    limits = Limits(deadline_ms=30_000, grace_ms=90_000)
    said = explain(Explanation.HARD_CEILING, "en", limits)
    assert "30 seconds" in said and "1.5 minutes" in said
    assert "0-minute" not in said
    assert "30 секунд" in explain(Explanation.DEADLINE, "ru", limits)
