"""The messages between workflows and activities: small, so histories stay small.

Big texts (the task, outcome texts, the last completed message) stay in the store and the result
directories; these messages carry ids, counters and short summaries only.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from pydantic import BaseModel, Field

from contracts.core_api import Action, QuestionChoices
from domain.book import Entry, EventState, OwnerBook
from domain.ids import GoalId, HelperId, OwnerId
from domain.limits import FollowTuning, Limits, Policy
from domain.outcome import OutcomeKind
from domain.requests import HelperRequest
from domain.rows import RowState
from domain.work import Usage


class RowKey(BaseModel):
    """Which row, which admission of it, and the writer's generation (SPEC "Parts": writer generation)."""

    owner: OwnerId
    helper_id: HelperId
    seq: int
    generation: int


class FollowedUp(BaseModel):
    """The earlier row a follow-up continues, as the admission leaves it: linked, and delivered if it was
    unreported. Written in the admission's transaction, guarded by its generation."""

    helper_id: HelperId
    seq: int
    generation: int
    state: RowState
    delivered_at: datetime | None = None
    keep_until: datetime | None = None


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

    @property
    def helper_ids(self) -> list[str]:
        return [row.helper_id for row in self.rows]


class RemovedRows(BaseModel):
    removed: list[str]
    directories_left: list[str] = Field(default_factory=list, description="Left for the orphan sweep.")


class HelperStart(BaseModel):
    """A helper workflow's input, set by the coordinator at admission."""

    owner: OwnerId
    helper_id: HelperId
    seq: int
    goal_id: GoalId | None = None
    language: str
    model: str
    boundary: tuple[str, ...] = Field(
        default=(), description="The request's boundary: a question's answer admits its follow-up with it (R49)."
    )
    limits: Limits
    slot_granted: bool
    summary_max: int
    check_ms: int
    keep_ms: int | None = Field(default=None, description="The owner's HELPER_KEEP_MS (None: the worker's).")
    follow: FollowTuning
    title: str = Field(description="First line of the task, shown in the Web UI.")


class Admitted(Protocol):
    """What a helper's start takes from its admission: the request as admitted, or the row it wrote."""

    @property
    def owner(self) -> str: ...
    @property
    def helper_id(self) -> str: ...
    @property
    def goal_id(self) -> str | None: ...
    @property
    def language(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def task(self) -> str: ...
    @property
    def boundary(self) -> Sequence[str]: ...


def helper_start(policy: Policy, admitted: Admitted, *, seq: int, limits: Limits, slot_granted: bool) -> HelperStart:
    """A helper workflow's input: its admission, with what it takes from the owner's policy."""
    return HelperStart(
        owner=admitted.owner,
        helper_id=admitted.helper_id,
        seq=seq,
        goal_id=admitted.goal_id,
        language=admitted.language,
        model=admitted.model,
        boundary=tuple(admitted.boundary),
        limits=limits,
        slot_granted=slot_granted,
        summary_max=policy.summary_max,
        check_ms=policy.check_ms,
        keep_ms=policy.keep_ms,
        follow=policy.follow,
        title=_title(admitted.task),
    )


def _title(task: str) -> str:
    """A helper's title in the Web UI: the first line of its task, at most 80 characters."""
    first = task.strip().splitlines()[0] if task.strip() else ""
    return first[:80] + ("…" if len(first) > 80 else "")


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


class OfferEvent(BaseModel):
    owner: OwnerId
    key: str
    helper_ids: list[HelperId]
    language: str
    attempts: int


class OfferResult(BaseModel):
    state: EventState
    busy: bool = False
    receipt_id: str | None = None
    error: str | None = None


class WithdrawnEvent(BaseModel):
    owner: OwnerId
    key: str


def entry_row(owner: str, entry: Entry) -> RowKey:
    """The row of a book entry, at the generation the coordinator writes it with."""
    return RowKey(owner=owner, helper_id=entry.helper_id, seq=entry.seq, generation=entry.generation)


def rows_to_remove(owner: str, entries: list[Entry]) -> RemoveRows:
    return RemoveRows(owner=owner, rows=[RowToRemove(helper_id=e.helper_id, seq=e.seq) for e in entries])


def new_row(book: OwnerBook, request: HelperRequest, entry: Entry, limits: Limits, now: datetime) -> NewRow:
    """The admission's row write; a follow-up's carries the earlier row as the admission left it."""
    earlier = book.entries.get(entry.follow_up_of) if entry.follow_up_of else None
    followed_up = None
    if earlier is not None:
        followed_up = FollowedUp(
            helper_id=earlier.helper_id,
            seq=earlier.seq,
            generation=earlier.generation,
            state=earlier.state,
            delivered_at=earlier.delivered_at,
            keep_until=earlier.keep_until,
        )
    return NewRow(request=request, seq=entry.seq, limits=limits, admitted_at=now, followed_up=followed_up)
