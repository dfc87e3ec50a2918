"""The owner book: the coordinator's whole state for one owner, as plain data (R2-R8, R22-R23, R26-R29, R49).

The coordinator workflow holds one `OwnerBook`, passes it on when it continues as new, and changes it only
through the functions of this package, one module per concern: `admission`, `follow_up`, `answering`, `slots`,
`closing`, `delivery`, `outbox`, `retention`. They never do I/O, so unit and property tests cover every rule without
Temporal. A request is judged (`judge…`) into a `Judgement`: the refusal, or the verdict the handler carries out;
mutating functions change the book in place and return what the workflow must now do. Fields are added
with defaults only, so a book written by one build reads in the build before it (a rollback).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TypeAlias, TypeVar

from pydantic import BaseModel, Field

from domain.ids import GoalId, HelperId, OwnerId
from domain.limits import Policy, WaitPolicy
from domain.messages.signals import Asked, FinishedNotice
from domain.messages.updates import OwnerAnswer
from domain.outcome import OutcomeKind
from domain.rows import RowState
from domain.texts import text

# A slot is a lease: a helper that never reports back (terminated by hand, say) loses its slot this
# long after its own hard ceiling, so a lost signal cannot hold a slot forever.
LEASE_MARGIN = timedelta(minutes=5)
# Finished notices of helpers whose admission is not recorded yet (a worker died mid-admission); bounded.
EARLY_NOTICES_KEPT = 20


class Entry(BaseModel):
    """One retained row as the coordinator sees it."""

    helper_id: HelperId
    seq: int
    goal_id: GoalId | None = None
    language: str = "en"
    state: RowState
    helper_writes: bool = Field(
        default=True, description="The helper workflow still owns the row; the coordinator takes over at its end."
    )
    holds_slot: bool = False
    lease_until: datetime | None = None
    finding_lost_session: bool = Field(
        default=False,
        description="Finished (its outcome is readable, it is not open), but holds its slot while it finds and "
        "stops a session its unanswered create may have made (R38).",
    )
    hard_ceiling_ms: int
    generation: int = 1
    outcome_kind: OutcomeKind | None = None
    admitted_at: datetime
    finished_at: datetime | None = None
    delivered_at: datetime | None = None
    keep_until: datetime | None = None
    close_requested: bool = False
    announced: bool = False  # a chat event carrying it was delivered, or given up on
    follow_up_of: HelperId | None = None  # the earlier helper whose outcome this one continues
    followed_up_by: HelperId | None = None  # the helper that continues this one's outcome (at most one)
    asked: Asked | None = None  # what its question or authorization wait takes as an answer (R49)
    answer: OwnerAnswer | None = None  # the one authoritative answer, once given (R49)
    wait: WaitPolicy | None = None  # its wait's reminders and bound (R54); None: the owner's policy
    wait_ends_at: datetime | None = None  # set when its wait begins (delivered, unanswered)
    reminders_sent: int = 0
    expired_at: datetime | None = None

    @property
    def is_goal_check(self) -> bool:
        return self.goal_id is not None


def wait_under_way(entry: Entry) -> bool:
    """Its question or authorization wait runs (R54): delivered, unanswered, not closed, not followed up, not
    expired."""
    return (
        entry.wait_ends_at is not None
        and entry.answer is None
        and entry.state is RowState.DELIVERED
        and not entry.close_requested
        and entry.followed_up_by is None
    )


class EventKind(StrEnum):
    READY = "ready"  # outcomes are ready to report (R26)
    REMINDER = "reminder"  # a wait for the owner is still unanswered (R54)
    EXPIRED = "expired"  # a wait for the owner ended unanswered (R54)


class Notice(BaseModel):
    """A reminder or an expiry due to be told to the chat, once (R54)."""

    kind: EventKind
    helper_id: HelperId
    key: str


class ExpiredWait(BaseModel):
    """A wait that ended unanswered, remembered after its row is gone: a late answer is refused `expired`."""

    helper_id: HelperId
    expired_at: datetime


class EventState(StrEnum):
    PENDING = "pending"
    ATTEMPTING = "attempting"
    DELIVERED = "delivered"
    FAILED = "failed"
    UNCERTAIN = "uncertain"
    WITHDRAWN = "withdrawn"  # its outcomes were all closed or delivered before the chat took it (R22)


class ChatEventRecord(BaseModel):
    """One system event offered to the chat (R26); `delivered` only with the chat's receipt."""

    key: str
    helper_ids: list[HelperId]
    kind: EventKind = EventKind.READY
    state: EventState = EventState.PENDING
    attempts: int = 0
    receipt_id: str | None = None
    last_error: str | None = None
    first_offered_at: datetime | None = None


class OwnerBook(BaseModel):
    owner: OwnerId
    policy: Policy = Policy()
    language: str = Field(default="en", description="The owner's language as of the latest request.")
    next_seq: int = 1
    entries: dict[HelperId, Entry] = Field(default_factory=dict)
    queue: list[HelperId] = Field(default_factory=list, description="Waiting helper ids in admission order (R6).")
    turn_reads: dict[str, list[HelperId]] = Field(default_factory=dict)
    recently_removed: list[HelperId] = Field(
        default_factory=list, description="Ids whose rows were removed lately: closing them again is harmless."
    )
    next_event_seq: int = 1
    event: ChatEventRecord | None = None
    withdrawn: list[str] = Field(
        default_factory=list, description="Keys of events withdrawn (R22) whose state the store does not show yet."
    )
    early_notices: list[FinishedNotice] = Field(
        default_factory=list, description="Notices of helpers whose admission is not recorded yet (a crash)."
    )
    notices: list[Notice] = Field(default_factory=list, description="Reminders and expiries not yet offered (R54).")
    recently_expired: list[ExpiredWait] = Field(
        default_factory=list, description="Waits that expired, of rows removed lately: a late answer is refused."
    )

    def open_ids(self) -> list[str]:
        return [e.helper_id for e in self._by_seq() if e.state.is_open]

    def slot_holders(self) -> list[str]:
        return [e.helper_id for e in self._by_seq() if e.holds_slot]

    def _by_seq(self) -> list[Entry]:
        return sorted(self.entries.values(), key=lambda e: e.seq)


class RefusalCode(StrEnum):
    TOO_MANY_OPEN = "too_many_open"
    GOAL_NEEDS_OPEN_PLACE = "goal_needs_open_place"
    ROWS_FULL = "rows_full"
    GOAL_NEEDS_ROW_PLACE = "goal_needs_row_place"
    UNKNOWN_HELPER = "unknown_helper"
    NOT_UNREPORTED = "not_unreported"
    INVALID_REQUEST = "invalid_request"
    WRONG_OWNER = "wrong_owner"
    NOT_FOLLOWABLE = "not_followable"
    NOT_ANSWERABLE = "not_answerable"  # no question or authorization waits for an answer
    STALE_QUESTION = "stale_question"  # the answer names another question than the one waiting
    NOT_OFFERED = "not_offered"  # an option that was not offered, or free text where none is taken
    GRANT_REFUSED = "grant_refused"  # the authorization asked for does not parse as a boundary item
    GRANT_WIDENS = "grant_widens"  # the action granted is wider than or other than the one asked (R55)
    EXPIRED = "expired"  # the wait ended unanswered at its bound (R54)
    WAIT_ENDED = "wait_ended"  # the wait ended otherwise, and only its record remembers the helper (R56)


class Refusal(BaseModel):
    """A refused request: a machine-readable code and a text in the owner's language."""

    code: RefusalCode
    message: str
    open_ids: list[str] = Field(default_factory=list)


V = TypeVar("V")
# Every judgement of the book answers in this one form: the refusal, or the verdict its handler carries out (each
# concern module names its `Verdict`).
Judgement: TypeAlias = Refusal | V


@dataclass(frozen=True)
class AwaitEarlier:
    """The verdict for a request about a helper still working: its outcome can reach the row a moment before its
    finished notice reaches the book, so the coordinator waits (bounded) for the notice, then judges again."""


RECENTLY_REMOVED_KEPT = 100


def note_removed(book: OwnerBook, removed: list[Entry]) -> None:
    """Remember for a while the ids of removed rows the owner had closed: closing one again is harmless (R23); and the
    waits that had expired: a late answer is refused `expired`, not `unknown_helper` (R54). A row removed otherwise
    (its keep over after delivery, evicted for room) is no helper any more, as `show` says."""
    closed = [entry.helper_id for entry in removed if entry.state is RowState.CLOSED]
    book.recently_removed = [h for h in book.recently_removed if h not in closed] + closed
    del book.recently_removed[:-RECENTLY_REMOVED_KEPT]
    expired = [
        ExpiredWait(helper_id=entry.helper_id, expired_at=entry.expired_at)
        for entry in removed
        if entry.state is RowState.EXPIRED and entry.expired_at is not None
    ]
    gone = {wait.helper_id for wait in expired}
    book.recently_expired = [w for w in book.recently_expired if w.helper_id not in gone] + expired
    del book.recently_expired[:-RECENTLY_REMOVED_KEPT]


def refusal(code: RefusalCode, text_key: str, language: str, **fields: str) -> Refusal:
    """A refusal whose message is the owner-facing text `text_key` (domain.texts) in the owner's language."""
    return Refusal(code=code, message=text(text_key, language, **fields))


def unknown_helper(helper_id: str, language: str) -> Refusal:
    """A helper this book does not have (another owner's helper is not in it either)."""
    return refusal(RefusalCode.UNKNOWN_HELPER, "refused.unknown_helper", language, helper_id=helper_id)


def other_owner(book: OwnerBook, owner: str, language: str) -> Refusal | None:
    """A request for another owner than this book's: a raw client sent it to the wrong coordinator."""
    if owner == book.owner:
        return None
    return Refusal(
        code=RefusalCode.WRONG_OWNER, message=text("refused.wrong_owner", language, owner=book.owner, asked=owner)
    )


def still_working(book: OwnerBook, helper_id: str) -> bool:
    """Whether the helper has yet to finish as the book knows it: its outcome can reach the row a moment before its
    finished notice reaches the book."""
    entry = book.entries.get(helper_id)
    return entry is not None and entry.state.is_open and not entry.close_requested


def forget_reads(book: OwnerBook, helper_ids: list[str]) -> None:
    """Turns that read these outcomes and never answered (lost in a restart) have nothing left to deliver."""
    for turn in list(book.turn_reads):
        book.turn_reads[turn] = [h for h in book.turn_reads[turn] if h not in helper_ids]
        if not book.turn_reads[turn]:
            del book.turn_reads[turn]


@dataclass
class BookSummary:
    """Counts for logs and the Web UI's current details."""

    open: int
    running: int
    waiting: int
    rows: int
    unreported: int = 0


def summarize_book(book: OwnerBook) -> BookSummary:
    entries = list(book.entries.values())
    return BookSummary(
        open=len(book.open_ids()),
        running=len(book.slot_holders()),
        waiting=len(book.queue),
        rows=len(entries),
        unreported=sum(e.state is RowState.UNREPORTED for e in entries),
    )
