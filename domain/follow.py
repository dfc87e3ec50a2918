"""What a session snapshot means for its helper (R11, R13, R16, R17, R24): pure decisions.

The follow activity polls the core and calls `judge` on every snapshot; it returns to the workflow
only when `judge` says the workflow must decide. The workflow maps the result to one outcome kind
with `terminal_outcome_kind`.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

from domain.core_api import Action, SessionStatus, Snapshot, StopReason
from domain.limits import FollowTuning
from domain.outcome import OutcomeKind
from domain.work import Usage, fold_usage


class Verdict(StrEnum):
    TERMINAL = "terminal"  # the session ended by itself, or after finish-now or cancel
    QUESTION = "question"  # the model asked the owner something (R16)
    AUTHORIZATION = "authorization"  # an action waits for authorization (R17)
    WORK_CEILING = "work_ceiling"  # the work counter reached HELPER_CEILING_TOKENS (R13)
    LOST = "lost"  # the core no longer knows the session (R24)
    CORE_FAILED = "core_failed"  # the core kept answering badly, or not at all, past the budget


class FollowRequest(BaseModel):
    """What the follow activity needs; small, so the history entry stays small."""

    owner: str
    helper_id: str
    seq: int
    session_id: str
    generation: int = Field(description="Progress writes are accepted only at this row generation.")
    ceiling_tokens: int
    watch_work_ceiling: bool = True  # false once finish-now was asked for because of it
    tuning: FollowTuning


class FollowCursor(BaseModel):
    """The follow activity's heartbeat details: what it already wrote, and how long the core is silent."""

    status: str | None = None
    steps: int = -1
    work_tokens: int = -1
    input_tokens: int = 0
    message_length: int = -1
    message_hash: int = 0
    silent_since: datetime | None = None
    bad_answers: int = 0


class FollowResult(BaseModel):
    verdict: Verdict
    status: SessionStatus | None = None
    usage: Usage = Usage()
    question: str | None = None
    authorization: str | None = None
    actions: list[Action] = Field(default_factory=list)
    refusals: list[str] = Field(default_factory=list)
    stop_reason: StopReason | None = None
    error: str | None = None


def judge(snapshot: Snapshot, usage: Usage, ceiling_tokens: int, watch_work_ceiling: bool) -> Verdict | None:
    """The verdict for one snapshot, or None to keep following."""
    if snapshot.status.is_terminal:
        return Verdict.TERMINAL
    if snapshot.status is SessionStatus.QUESTION:
        return Verdict.QUESTION
    if snapshot.status is SessionStatus.AUTHORIZATION:
        return Verdict.AUTHORIZATION
    if watch_work_ceiling and usage.work_tokens >= ceiling_tokens:
        return Verdict.WORK_CEILING
    return None


def result_from(snapshot: Snapshot, verdict: Verdict) -> FollowResult:
    usage = fold_usage(snapshot.steps, snapshot.input_tokens_total)
    return FollowResult(
        verdict=verdict,
        status=snapshot.status,
        usage=usage,
        question=snapshot.question,
        authorization=(
            None
            if snapshot.authorization is None
            else " — ".join(p for p in (snapshot.authorization.action, snapshot.authorization.reason) if p)
        ),
        actions=snapshot.actions,
        refusals=snapshot.refusals,
        stop_reason=snapshot.outcome.stop_reason if snapshot.outcome else None,
        error=snapshot.error,
    )


def terminal_outcome_kind(status: SessionStatus, *, closing: bool, stopping_for_authorization: bool) -> OutcomeKind:
    """The outcome kind of a session that ended, given why the helper may have stopped it."""
    if closing:
        return OutcomeKind.CLOSED
    if stopping_for_authorization:
        return OutcomeKind.AUTHORIZATION
    match status:
        case SessionStatus.COMPLETED:
            return OutcomeKind.COMPLETED
        case SessionStatus.PARTIAL:
            return OutcomeKind.PARTIAL
        case SessionStatus.FAILED:
            return OutcomeKind.FAILED
        case _:
            # Cancelled by someone other than this helper, or interrupted by a core restart:
            # nothing is replayed (R24).
            return OutcomeKind.INTERRUPTED
