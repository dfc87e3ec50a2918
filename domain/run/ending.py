"""How a running helper ends: one pure decision table, trigger x situation -> step (R7, R13, R15-R17, R21, R24, R35).

The helper workflow waits for the first trigger (the hard ceiling, a close, the deadline, the open's answer,
the follow's verdict, a cancel's or a finish-now's answer), and `domain.run.helper_run` records it in the run and
asks `decide` what to do. Finish-now and cancel run *beside* the follow, never instead of it, so whichever
comes first wins: the follow seeing the turn stop, the core confirming a cancel, or the hard ceiling. Nothing
here awaits anything, so nothing here can outlive the hard ceiling.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from contracts.core_api import SessionStatus
from domain.messages.activities import Verdict
from domain.outcome import OutcomeKind
from domain.rows import RowState


class Trigger(StrEnum):
    HARD_CEILING = "hard_ceiling"  # deadline + grace: final whatever the core does
    CLOSE = "close"  # the owner closed the helper
    DEADLINE = "deadline"  # ask for the partial outcome
    OPENED = "opened"  # the core answered the create with a session id
    OPEN_FAILED = "open_failed"  # the core refused the create, or the row is gone: no session exists
    FOLLOW = "follow"  # the follow activity returned a verdict
    CANCEL_ANSWERED = "cancel_answered"  # a cancel (close or authorization cleanup) was answered
    FINISH_ANSWERED = "finish_answered"  # a finish-now was answered (or failed): the follow tells what it did


class Phase(StrEnum):
    OPENING = "opening"  # the create was sent; its answer (the session id) is not known yet
    FOLLOWING = "following"  # the session id is known and followed


class FinishReason(StrEnum):
    DEADLINE = "deadline"
    WORK_CEILING = "work_ceiling"


class Explanation(StrEnum):
    """Why the outcome is what it is; `domain.run.ending_texts` says it in the owner's language."""

    NONE = "none"  # the core's own outcome speaks for itself
    CLOSED = "closed"
    DEADLINE = "deadline"
    WORK_CEILING = "work_ceiling"
    HARD_CEILING = "hard_ceiling"
    TURN_INTERRUPTED = "turn_interrupted"  # the core stopped the turn (restart, someone else's cancel)
    SESSION_LOST = "session_lost"  # the core no longer knows the session
    CORE_REJECTED = "core_rejected"  # the core refused the task
    NO_START = "no_start"  # the create was never answered in time
    CORE_BAD_ANSWERS = "core_bad_answers"  # the core kept answering outside the contract
    CORE_SILENT = "core_silent"  # the core gave no answer for the silence budget


@dataclass(frozen=True)
class Ending:
    kind: OutcomeKind
    explanation: Explanation = Explanation.NONE


def row_state_of(kind: OutcomeKind) -> RowState:
    """The row's state when its outcome is written: a closed helper reports nothing (R21); every other outcome
    waits to be told (R26)."""
    return RowState.CLOSED if kind is OutcomeKind.CLOSED else RowState.UNREPORTED


class Situation(Protocol):
    """What the table reads of the helper's run when a trigger comes (the run is `domain.run.helper_run.HelperRun`)."""

    @property
    def phase(self) -> Phase: ...

    @property
    def closing(self) -> bool:
        """Closed by the owner while running; the slot waits for the core's stop (R7)."""
        ...

    @property
    def finish_reason(self) -> FinishReason | None:
        """Why finish-now was asked for, once it was."""
        ...

    @property
    def stopping_for_authorization(self) -> bool:
        """The cleanup cancel of an authorization wait was sent (R17)."""
        ...


@dataclass(frozen=True)
class Step:
    """What the workflow does now. At most one of `end` and the rest matters: an ending stops everything."""

    end: Ending | None = None
    close_row: bool = False  # close the row at once and tell the coordinator (R21)
    cancel: bool = False  # send a cancel beside the follow
    finish: FinishReason | None = None  # ask for the partial outcome beside the follow (R13, R15)
    follow: bool = False  # (re)start following the session
    watch_work_ceiling: bool = True  # the follow returns at the work ceiling
    stop_at_pauses: bool = True  # the follow returns at a question or an authorization wait
    stopping_for_authorization: bool = False


CLOSED = Ending(OutcomeKind.CLOSED, Explanation.CLOSED)
NOTHING = Step()


def decide(
    trigger: Trigger,
    situation: Situation,
    *,
    verdict: Verdict | None = None,
    status: SessionStatus | None = None,
    stopped: bool = False,
    silent: bool = False,
    deadline_passed: bool = False,
) -> Step:
    """The one decision table of a running helper. `verdict`/`status` come with FOLLOW, `stopped` with
    CANCEL_ANSWERED, `silent` tells a silent core from a babbling one, `deadline_passed` comes with OPENED."""
    closing = situation.closing
    match trigger:
        case Trigger.HARD_CEILING:
            return Step(end=_at_hard_ceiling(situation))
        case Trigger.CLOSE:
            if closing:
                return NOTHING
            # While opening, the cancel waits for the session id (OPENED below); the slot stays held.
            return Step(close_row=True, cancel=situation.phase is Phase.FOLLOWING)
        case Trigger.DEADLINE:
            if closing or situation.finish_reason is not None or situation.stopping_for_authorization:
                return NOTHING
            if situation.phase is Phase.OPENING:
                return NOTHING  # asked for as soon as the session is known (OPENED)
            return Step(finish=FinishReason.DEADLINE)
        case Trigger.OPENED:
            return Step(
                follow=True,
                cancel=closing,
                finish=FinishReason.DEADLINE if deadline_passed and not closing else None,
                watch_work_ceiling=True,
            )
        case Trigger.OPEN_FAILED:
            return Step(end=CLOSED if closing else Ending(OutcomeKind.FAILED, Explanation.CORE_REJECTED))
        case Trigger.FINISH_ANSWERED:
            return NOTHING  # the follow goes on; if the core never finishes, the hard ceiling still holds (R15)
        case Trigger.CANCEL_ANSWERED:
            if not stopped:
                return NOTHING  # the follow goes on; the turn's end or the hard ceiling decides
            if closing:
                return Step(end=CLOSED)
            if situation.stopping_for_authorization:
                return Step(end=Ending(OutcomeKind.AUTHORIZATION))
            return NOTHING
        case Trigger.FOLLOW:
            assert verdict is not None
            return _on_verdict(verdict, situation, status, silent)


def _at_hard_ceiling(situation: Situation) -> Ending:
    if situation.closing:
        return CLOSED
    if situation.phase is Phase.OPENING:
        return Ending(OutcomeKind.FAILED, Explanation.NO_START)
    if situation.stopping_for_authorization:
        return Ending(OutcomeKind.AUTHORIZATION)
    return Ending(OutcomeKind.PARTIAL, Explanation.HARD_CEILING)


def _on_verdict(verdict: Verdict, situation: Situation, status: SessionStatus | None, silent: bool) -> Step:
    closing = situation.closing
    # Keep following with the same watch: closing or authorization stops wait only for the turn's end.
    keep_following = Step(
        follow=True,
        watch_work_ceiling=situation.finish_reason is None and not closing,
        stop_at_pauses=not (closing or situation.stopping_for_authorization),
    )
    match verdict:
        case Verdict.TERMINAL:
            assert status is not None
            return Step(end=_terminal_ending(status, situation))
        case Verdict.QUESTION:
            # A question ends the turn (R16): like a terminal event it frees the slot, closing or not.
            return Step(end=CLOSED if closing else Ending(OutcomeKind.QUESTION))
        case Verdict.AUTHORIZATION:
            if closing or situation.stopping_for_authorization:
                return keep_following
            # Without a webhook an authorization wait ends by a cleanup cancel (seed, R17).
            return Step(
                cancel=True,
                follow=True,
                watch_work_ceiling=False,
                stop_at_pauses=False,
                stopping_for_authorization=True,
            )
        case Verdict.WORK_CEILING:
            if closing or situation.finish_reason is not None:
                return Step(follow=True, watch_work_ceiling=False, stop_at_pauses=keep_following.stop_at_pauses)
            return Step(
                finish=FinishReason.WORK_CEILING,
                follow=True,
                watch_work_ceiling=False,
                stop_at_pauses=keep_following.stop_at_pauses,
            )
        case Verdict.LOST:
            return Step(end=CLOSED if closing else Ending(OutcomeKind.INTERRUPTED, Explanation.SESSION_LOST))
        case Verdict.CORE_FAILED:
            if closing:  # closed by the owner: it reports nothing, whatever the core did (R21)
                return Step(end=CLOSED)
            explanation = Explanation.CORE_SILENT if silent else Explanation.CORE_BAD_ANSWERS
            return Step(end=Ending(OutcomeKind.FAILED, explanation))


def _terminal_ending(status: SessionStatus, situation: Situation) -> Ending:
    if situation.closing:
        return CLOSED
    if situation.stopping_for_authorization:
        return Ending(OutcomeKind.AUTHORIZATION)
    match status:
        case SessionStatus.COMPLETED:
            return Ending(OutcomeKind.COMPLETED)
        case SessionStatus.PARTIAL:
            if situation.finish_reason is FinishReason.WORK_CEILING:
                return Ending(OutcomeKind.PARTIAL, Explanation.WORK_CEILING)
            if situation.finish_reason is FinishReason.DEADLINE:
                return Ending(OutcomeKind.PARTIAL, Explanation.DEADLINE)
            return Ending(OutcomeKind.PARTIAL)  # the core's own ceiling: its text explains the stop (R14)
        case SessionStatus.FAILED:
            return Ending(OutcomeKind.FAILED)
        case _:
            # Cancelled by someone other than this helper, or interrupted by a core restart: nothing is
            # replayed (R24).
            return Ending(OutcomeKind.INTERRUPTED, Explanation.TURN_INTERRUPTED)
