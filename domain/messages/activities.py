"""Every activity's input and result: small, so histories stay small.

Big texts (the task, outcome texts, the last completed message) stay in the store and the result
directories; these messages carry ids, counters and short summaries only.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

from contracts.core_api import Action, QuestionChoices, SessionStatus, StopReason
from domain.audit import WaitEnd
from domain.book import EventKind, EventState
from domain.bounds import NOTICE_ABOUT_MAX
from domain.goals import Goal
from domain.ids import HelperId, OwnerId
from domain.limits import FollowTuning, Limits, Policy
from domain.messages.workflows import HelperStart
from domain.outcome import OutcomeKind
from domain.requests import HelperRequest
from domain.rows import RowState
from domain.work import Usage


class RowKey(BaseModel):
    """Which row, which admission of it, and the writer's generation (the writer's generation, docs/architecture.md)."""

    owner: OwnerId
    helper_id: HelperId
    seq: int
    generation: int


class WaitSchedule(BaseModel):
    """A delivered wait's bound and reminders (milliseconds after delivery), as the row keeps them for the inbox."""

    ends_at: datetime
    reminders_ms: list[int] = Field(default_factory=list)


class FollowedUp(BaseModel):
    """The earlier row a follow-up continues, as the admission leaves it: linked, and delivered if it was
    unreported. Written in the admission's transaction, guarded by its generation."""

    helper_id: HelperId
    seq: int
    generation: int
    state: RowState
    delivered_at: datetime | None = None
    keep_until: datetime | None = None
    ended: WaitEnd | None = Field(default=None, description="Its wait ended with this admission: its record (R56).")


class NewRow(BaseModel):
    request: HelperRequest
    seq: int
    limits: Limits
    admitted_at: datetime
    followed_up: FollowedUp | None = None


class RowToRemove(BaseModel):
    helper_id: HelperId
    seq: int


class RemoveRows(BaseModel):
    """Rows to remove with their result directories; the seq names each directory even once the row is gone,
    so a retry after a crash between the two removals still finds the directory."""

    owner: OwnerId
    rows: list[RowToRemove]
    ended: list[WaitEnd] = Field(default_factory=list, description="Waits the removal ends: their records (R56).")

    @property
    def helper_ids(self) -> list[str]:
        return [row.helper_id for row in self.rows]


class RemovedRows(BaseModel):
    removed: list[str]
    directories_left: list[str] = Field(default_factory=list, description="Left for the orphan sweep.")


class AdmitHelper(BaseModel):
    row: NewRow
    start: HelperStart
    # Rows removed to make room, first, in the same activity.
    evict: RemoveRows | None = None


class RegrantHelper(BaseModel):
    """A slot granted to a helper whose workflow did not answer: the admission, and the owner's settings its
    workflow needs if it has to be started from its row."""

    owner: OwnerId
    helper_id: HelperId
    seq: int
    policy: Policy


class Regranted(StrEnum):
    GRANTED = "granted"  # the admission's workflow runs and now has the slot
    STARTED = "started"  # it had never been started: started from its row, holding the slot
    ENDED = "ended"  # its run ended (terminated) with the row still open: the slot passes on, the row closes
    GONE = "gone"  # no open row of this admission (final, removed, or another admission's): the slot passes on


# `check_ms` travels with each core call, from the owner's policy, so the call's bound and its activity's
# timeout come from one source (None: the worker's setting applies).


class OpenSession(BaseModel):
    row: RowKey
    idempotency_key: str
    limits: Limits
    started_at: datetime
    deadline_at: datetime
    check_ms: int | None = None


class OpenedSession(BaseModel):
    session_id: str
    created: bool


class SessionRef(BaseModel):
    owner: OwnerId
    helper_id: HelperId
    session_id: str
    check_ms: int | None = None
    outcome_kind: OutcomeKind | None = Field(
        default=None, description="For the cleanup reset: the outcome, so only a followable one looks at its row."
    )


class RecoverSession(BaseModel):
    """Find a session whose create was never answered (same idempotency key), then cancel and reset it."""

    row: RowKey
    idempotency_key: str
    limits: Limits
    check_ms: int | None = None


class RecoveredSession(BaseModel):
    session_id: str | None = None  # None: the core made no session under the key, or could not be asked
    stopped: bool = Field(default=False, description="Only when the core said so: a stopped turn, or a reset.")
    detail: str = Field(default="", description="What the core answered, for the log.")


class ParkSession(BaseModel):
    """A session whose cleanup reset kept failing: listed for the hourly sweep to try again (R20)."""

    owner: OwnerId
    helper_id: HelperId
    session_id: str
    error: str = Field(max_length=2_000)


class CancelResult(BaseModel):
    stopped: bool
    detail: str = ""


class MarkClosed(BaseModel):
    row: RowKey


class Finalize(BaseModel):
    """Everything the one finalizer writes (R18, R19)."""

    row: RowKey
    kind: OutcomeKind
    state: RowState
    language: str
    model: str
    explanation: str = ""
    session_id: str | None = Field(default=None, description="The session the full lists in session.json belong to.")
    question: str | None = None
    choices: QuestionChoices | None = Field(
        default=None, description="A question outcome's choices, whole: the contract bounds them (R36, R37)."
    )
    authorization: str | None = None
    actions: list[Action] = Field(default_factory=list)
    actions_total: int = Field(default=0, description="Actions the session performed; `actions` holds the first.")
    refusals: list[str] = Field(default_factory=list)
    usage: Usage | None = Field(default=None, description="None: take the counters last folded into the row.")
    summary_max: int
    finished_at: datetime
    keep_until: datetime | None = Field(
        default=None, description="A closed row's removal time, from the owner's policy (the coordinator's)."
    )


class WrittenOutcome(BaseModel):
    """The outcome a row already had when a write of it ran again: it stays, and the workflow ends with it (R19)."""

    kind: OutcomeKind
    explanation: str = ""


class Finalized(BaseModel):
    applied: bool
    summary: str
    result_dir: str
    already: WrittenOutcome | None = None


class CoordinatorWrite(BaseModel):
    """A row write by the coordinator after the helper handed the row back (delivered, closed)."""

    row: RowKey
    state: RowState
    delivered_at: datetime | None = None
    keep_until: datetime | None = None
    ended: WaitEnd | None = Field(default=None, description="The row's wait ends with this write: its record (R56).")
    wait: WaitSchedule | None = Field(default=None, description="Delivered: the wait that begins (R54, R56).")


class OfferEvent(BaseModel):
    owner: OwnerId
    key: str
    helper_ids: list[HelperId]
    language: str
    attempts: int
    kind: EventKind = EventKind.READY
    waits_for: str | None = Field(default=None, description="A notice's wait: question or authorization.")
    about: str | None = Field(default=None, max_length=NOTICE_ABOUT_MAX, description="What the wait asked.")


class OfferResult(BaseModel):
    state: EventState
    busy: bool = False
    receipt_id: str | None = None
    error: str | None = None


class WithdrawnEvent(BaseModel):
    owner: OwnerId
    key: str


# The follow's input, heartbeat details and result; what a snapshot means is `domain.run.follow`.


class Verdict(StrEnum):
    TERMINAL = "terminal"  # the session ended by itself, or after finish-now or cancel
    QUESTION = "question"  # the model asked the owner something (R16)
    AUTHORIZATION = "authorization"  # an action waits for authorization (R17)
    WORK_CEILING = "work_ceiling"  # the work counter reached HELPER_CEILING_TOKENS (R13)
    LOST = "lost"  # the core no longer knows the session (R24)
    CORE_FAILED = "core_failed"  # the core kept answering badly, or not at all, past the budget


class FollowRequest(BaseModel):
    """What the follow activity needs; small, so the history entry stays small."""

    owner: OwnerId
    helper_id: HelperId
    seq: int
    session_id: str
    generation: int = Field(description="Progress writes are accepted only at this row generation.")
    ceiling_tokens: int
    watch_work_ceiling: bool = True  # false once finish-now was asked for because of it
    stop_at_pauses: bool = True  # false while a cancel is meant to end a question or authorization pause
    tuning: FollowTuning
    check_ms: int | None = None  # the bound of each snapshot call, from the owner's policy
    # The helper's first follow records in its row when a worker began following it: one write per helper.
    records_start: bool = False


class CoreFaults(BaseModel):
    """The follow's heartbeat details: how long the core has given no valid answer, and how many malformed answers
    it gave in a row. The row holds the progress; this is what it does not hold, so that the silence budget spans
    attempts. Recorded only when it changes, so a core that answers costs no heartbeat (R57)."""

    silent_since: datetime | None = None
    bad_answers: int = 0


class FollowCursor(BaseModel):
    """What a follow attempt has written and seen: seeded from the row at the attempt's start, so that the next
    attempt neither writes again what the row holds nor misses a change."""

    status: str | None = None
    steps: int = -1
    work_tokens: int = -1
    input_tokens: int = 0
    message_length: int = -1
    message_hash: int = 0
    faults: CoreFaults = Field(default_factory=CoreFaults)
    saved_actions: int = -1  # actions and refusals last kept whole in session.json
    saved_refusals: int = -1
    version: int | None = None  # the snapshot version last seen; a core that sends one is long-polled (R44)


class FollowResult(BaseModel):
    verdict: Verdict
    status: SessionStatus | None = None
    usage: Usage = Usage()
    question: str | None = None
    # A structured question's choices (R49): only with a QUESTION verdict, from the snapshot judged; whole, as
    # they are bounded by the contract (domain.bounds).
    choices: QuestionChoices | None = None
    authorization: str | None = None
    # The action an authorization wait asks for, alone: a grant adds it to the boundary (R49). One character over
    # the item bound is kept, so an overlong action is refused at grant rather than cut to fit.
    authorization_action: str | None = None
    actions: list[Action] = Field(default_factory=list)
    refusals: list[str] = Field(default_factory=list)
    stop_reason: StopReason | None = None
    error: str | None = None
    silent: bool = False  # CORE_FAILED because the core gave no answer (not because it answered badly)
    actions_total: int = 0
    refusals_total: int = 0


# A Goal check's admission; its result is the Goal check workflow's too.


class GoalCheck(BaseModel):
    goal: Goal
    helper_id: str


class GoalCheckResult(BaseModel):
    helper_id: str
    admitted: bool
    status: str
    refusal_code: str | None = None
    message: str = ""
