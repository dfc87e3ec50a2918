"""The coordinator's whole state for one owner, and its decisions as pure functions (R2-R8, R22-R23, R26-R29).

`OwnerBook` is plain data: the coordinator workflow holds one, passes it on when it continues as
new, and calls the functions below to decide; the functions never do I/O, so unit and property
tests cover every rule without Temporal. Mutating functions change the book in place and return
what the workflow must now do (write rows, signal helpers, remove directories).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, Field

from domain.limits import Policy
from domain.outcome import OutcomeKind
from domain.requests import HelperRequest
from domain.rows import RowState
from domain.texts import text

# A slot is a lease: a helper that never reports back (terminated by hand, say) loses its slot this
# long after its own hard ceiling, so a lost signal cannot hold a slot forever.
LEASE_MARGIN = timedelta(minutes=5)


class Entry(BaseModel):
    """One retained row as the coordinator sees it."""

    helper_id: str
    seq: int
    goal_id: str | None = None
    language: str = "en"
    state: RowState
    helper_writes: bool = Field(
        default=True, description="The helper workflow still owns the row; the coordinator takes over at its end."
    )
    holds_slot: bool = False
    lease_until: datetime | None = None
    hard_ceiling_ms: int
    generation: int = 1
    outcome_kind: OutcomeKind | None = None
    admitted_at: datetime
    finished_at: datetime | None = None
    delivered_at: datetime | None = None
    keep_until: datetime | None = None
    close_requested: bool = False
    announced: bool = False  # a chat event carrying it was delivered, or given up on

    @property
    def is_goal_check(self) -> bool:
        return self.goal_id is not None

    @property
    def evictable(self) -> bool:
        """Retention pressure may remove only delivered or closed rows without a Goal (R3)."""
        return (
            self.state in (RowState.DELIVERED, RowState.CLOSED)
            and not self.is_goal_check
            and not self.helper_writes
            and not self.holds_slot
        )


class EventState(StrEnum):
    PENDING = "pending"
    ATTEMPTING = "attempting"
    DELIVERED = "delivered"
    FAILED = "failed"
    UNCERTAIN = "uncertain"


class ChatEventRecord(BaseModel):
    """One system event offered to the chat (R26); `delivered` only with the chat's receipt."""

    key: str
    helper_ids: list[str]
    state: EventState = EventState.PENDING
    attempts: int = 0
    receipt_id: str | None = None
    last_error: str | None = None
    first_offered_at: datetime | None = None


class OwnerBook(BaseModel):
    owner: str
    policy: Policy = Policy()
    language: str = Field(default="en", description="The owner's language as of the latest request.")
    next_seq: int = 1
    entries: dict[str, Entry] = Field(default_factory=dict)
    queue: list[str] = Field(default_factory=list, description="Waiting helper ids in admission order (R6).")
    turn_reads: dict[str, list[str]] = Field(default_factory=dict)
    recently_removed: list[str] = Field(
        default_factory=list, description="Ids whose rows were removed lately: closing them again is harmless."
    )
    next_event_seq: int = 1
    event: ChatEventRecord | None = None

    def open_ids(self) -> list[str]:
        return [e.helper_id for e in self._by_seq() if e.state.is_open]

    def slot_holders(self) -> list[str]:
        return [e.helper_id for e in self._by_seq() if e.holds_slot]

    def _by_seq(self) -> list[Entry]:
        return sorted(self.entries.values(), key=lambda e: e.seq)


# --- Admission (R2-R5) ------------------------------------------------------------------------------


class RefusalCode(StrEnum):
    TOO_MANY_OPEN = "too_many_open"
    GOAL_NEEDS_OPEN_PLACE = "goal_needs_open_place"
    ROWS_FULL = "rows_full"
    GOAL_NEEDS_ROW_PLACE = "goal_needs_row_place"
    UNKNOWN_HELPER = "unknown_helper"
    NOT_UNREPORTED = "not_unreported"
    INVALID_REQUEST = "invalid_request"
    WRONG_OWNER = "wrong_owner"


class Refusal(BaseModel):
    """A refused request: a machine-readable code and a text in the owner's language."""

    code: RefusalCode
    message: str
    open_ids: list[str] = Field(default_factory=list)


@dataclass(frozen=True)
class Admit:
    seq: int
    evict: list[str]
    starts_now: bool
    ahead: int


@dataclass(frozen=True)
class AlreadyAdmitted:
    entry: Entry


AdmissionDecision = Admit | AlreadyAdmitted | Refusal


def decide_admission(book: OwnerBook, request: HelperRequest) -> AdmissionDecision:
    """Admit, return the existing helper (R5), or refuse with the reason (R2, R3)."""
    existing = book.entries.get(request.helper_id)
    if existing is not None:
        return AlreadyAdmitted(existing)
    policy = book.policy
    language = request.language
    open_ids = book.open_ids()
    # A Goal check leaves one open place and one row place for an owner helper (R2, R3).
    reserve = 1 if request.is_goal_check else 0
    if len(open_ids) + 1 > policy.max_open - reserve:
        code = RefusalCode.GOAL_NEEDS_OPEN_PLACE if reserve else RefusalCode.TOO_MANY_OPEN
        return Refusal(
            code=code,
            message=text(
                f"refused.{code.value}",
                language,
                helper_id=request.helper_id,
                max_open=policy.max_open,
                open_ids=", ".join(open_ids),
            ),
            open_ids=open_ids,
        )
    evict = rows_to_evict(book, room_needed=1 + reserve)
    if evict is None:
        code = RefusalCode.GOAL_NEEDS_ROW_PLACE if reserve else RefusalCode.ROWS_FULL
        return Refusal(
            code=code,
            message=text(f"refused.{code.value}", language, helper_id=request.helper_id, max_rows=policy.max_rows),
        )
    starts_now = not book.queue and len(book.slot_holders()) < policy.max_running
    return Admit(seq=book.next_seq, evict=evict, starts_now=starts_now, ahead=len(book.queue))


def rows_to_evict(book: OwnerBook, room_needed: int) -> list[str] | None:
    """The oldest delivered or closed rows without a Goal to remove so `room_needed` rows fit, or None."""
    excess = len(book.entries) + room_needed - book.policy.max_rows
    if excess <= 0:
        return []
    candidates = sorted(
        (e for e in book.entries.values() if e.evictable),
        key=lambda e: (e.delivered_at or e.finished_at or e.admitted_at, e.seq),
    )
    if len(candidates) < excess:
        return None
    return [e.helper_id for e in candidates[:excess]]


RECENTLY_REMOVED_KEPT = 100


def _note_removed(book: OwnerBook, helper_ids: list[str]) -> None:
    book.recently_removed = [h for h in book.recently_removed if h not in helper_ids] + list(helper_ids)
    del book.recently_removed[:-RECENTLY_REMOVED_KEPT]


def apply_admission(
    book: OwnerBook, request: HelperRequest, decision: Admit, now: datetime, hard_ceiling_ms: int
) -> Entry:
    for helper_id in decision.evict:
        del book.entries[helper_id]
    _note_removed(book, decision.evict)
    if request.helper_id in book.recently_removed:
        book.recently_removed.remove(request.helper_id)
    entry = Entry(
        helper_id=request.helper_id,
        seq=decision.seq,
        goal_id=request.goal_id,
        language=request.language,
        state=RowState.WAITING,
        hard_ceiling_ms=hard_ceiling_ms,
        admitted_at=now,
    )
    book.entries[entry.helper_id] = entry
    book.queue.append(entry.helper_id)
    book.next_seq += 1
    book.language = request.language
    return entry


def undo_admission(book: OwnerBook, helper_id: str) -> None:
    """Forget an admission whose row could not be written, so it never holds a place."""
    book.entries.pop(helper_id, None)
    if helper_id in book.queue:
        book.queue.remove(helper_id)


# --- Slots (R6-R8) --------------------------------------------------------------------------------


def grant_slots(book: OwnerBook, now: datetime) -> list[str]:
    """Pass free slots to waiting helpers in admission order; returns the helpers granted."""
    granted: list[str] = []
    while book.queue and len(book.slot_holders()) < book.policy.max_running:
        helper_id = book.queue.pop(0)
        entry = book.entries[helper_id]
        entry.holds_slot = True
        entry.state = RowState.RUNNING
        entry.lease_until = now + timedelta(milliseconds=entry.hard_ceiling_ms) + LEASE_MARGIN
        granted.append(helper_id)
    return granted


def release_slot(book: OwnerBook, helper_id: str) -> bool:
    entry = book.entries.get(helper_id)
    if entry is None or not entry.holds_slot:
        return False
    entry.holds_slot = False
    entry.lease_until = None
    return True


def forget_gone_helper(book: OwnerBook, helper_id: str, now: datetime) -> None:
    """A helper workflow that no longer exists (removed by an operator) gives its slot and place back."""
    entry = book.entries.get(helper_id)
    if entry is None:
        return
    release_slot(book, helper_id)
    entry.helper_writes = False
    entry.state = RowState.CLOSED
    entry.finished_at = entry.finished_at or now
    entry.keep_until = now + timedelta(milliseconds=book.policy.keep_ms)
    if helper_id in book.queue:
        book.queue.remove(helper_id)


def expired_leases(book: OwnerBook, now: datetime) -> list[str]:
    return [e.helper_id for e in book.entries.values() if e.holds_slot and e.lease_until and e.lease_until <= now]


# --- A helper's end (R19, R26) ----------------------------------------------------------------------


class FinishedNotice(BaseModel):
    """Sent by a helper workflow once its outcome is final: the row passes back to the coordinator."""

    helper_id: str
    kind: OutcomeKind
    generation: int
    finished_at: datetime


def apply_finished(book: OwnerBook, notice: FinishedNotice) -> Entry | None:
    entry = book.entries.get(notice.helper_id)
    if entry is None or not entry.helper_writes:
        return None  # a repeated notice: the first one already handed the row over
    entry.helper_writes = False
    entry.holds_slot = False
    entry.lease_until = None
    entry.generation = max(entry.generation, notice.generation)
    entry.outcome_kind = notice.kind
    entry.finished_at = notice.finished_at
    if notice.helper_id in book.queue:
        book.queue.remove(notice.helper_id)
    if notice.kind is OutcomeKind.CLOSED:
        entry.state = RowState.CLOSED
        entry.keep_until = notice.finished_at + timedelta(milliseconds=book.policy.keep_ms)
    else:
        entry.state = RowState.UNREPORTED
    return entry


# --- Close (R21-R23) --------------------------------------------------------------------------------


class CloseAction(StrEnum):
    FORWARD_TO_HELPER = "forward_to_helper"  # the helper still owns the row: it closes and cancels
    WRITE_CLOSED = "write_closed"  # unreported: withdraw the automatic report (R22)
    REMOVE = "remove"  # delivered without a Goal: remove row and directory at once (R23)
    NOTHING = "nothing"  # already closed: closing twice is harmless
    ALREADY_REMOVED = "already_removed"  # closed and since removed (retention, eviction): harmless too


def decide_close(book: OwnerBook, helper_id: str) -> CloseAction | Refusal:
    entry = book.entries.get(helper_id)
    if entry is None and helper_id in book.recently_removed:
        return CloseAction.ALREADY_REMOVED
    if entry is None:
        return Refusal(
            code=RefusalCode.UNKNOWN_HELPER,
            message=text("refused.unknown_helper", book.language, helper_id=helper_id),
        )
    if entry.helper_writes:
        return CloseAction.FORWARD_TO_HELPER
    if entry.state is RowState.UNREPORTED:
        return CloseAction.WRITE_CLOSED
    if entry.state is RowState.DELIVERED:
        return CloseAction.WRITE_CLOSED if entry.is_goal_check else CloseAction.REMOVE
    return CloseAction.NOTHING


def apply_closed_by_coordinator(book: OwnerBook, helper_id: str) -> Entry:
    entry = book.entries[helper_id]
    entry.state = RowState.CLOSED
    entry.generation += 1
    entry.keep_until = (entry.finished_at or entry.admitted_at) + timedelta(milliseconds=book.policy.keep_ms)
    _forget_reads(book, [helper_id])
    withdraw_from_event(book, helper_id)
    return entry


def withdraw_from_event(book: OwnerBook, helper_id: str) -> None:
    """A closed outcome is no longer announced (R22); an event left with nothing to say is dropped."""
    event = book.event
    if event is None or event.state is EventState.DELIVERED or helper_id not in event.helper_ids:
        return
    event.helper_ids.remove(helper_id)
    if not event.helper_ids:
        book.event = None


# --- Reading and delivery (R27, R28) ------------------------------------------------------------


def decide_read(book: OwnerBook, helper_ids: list[str], *, allow_finishing: bool = False) -> Refusal | None:
    """Refuse unknown helpers and outcomes that are not unreported. With `allow_finishing`, a helper whose
    finished notice has not arrived yet passes: the store may already show its outcome to the chat."""
    for helper_id in helper_ids:
        entry = book.entries.get(helper_id)
        if entry is None:
            return Refusal(
                code=RefusalCode.UNKNOWN_HELPER,
                message=text("refused.unknown_helper", book.language, helper_id=helper_id),
            )
        if allow_finishing and entry.helper_writes and entry.state is RowState.RUNNING:
            continue
        if entry.state is not RowState.UNREPORTED:
            return Refusal(
                code=RefusalCode.NOT_UNREPORTED,
                message=text("refused.not_unreported", entry.language, helper_id=helper_id),
            )
    return None


def finishing(book: OwnerBook, helper_ids: list[str]) -> bool:
    """Some of these helpers still own their rows: their outcomes are being finalized."""
    return any((entry := book.entries.get(h)) is not None and entry.helper_writes for h in helper_ids)


def apply_read(book: OwnerBook, turn: str, helper_ids: list[str]) -> list[str]:
    reads = book.turn_reads.setdefault(turn, [])
    for helper_id in helper_ids:
        if helper_id not in reads:
            reads.append(helper_id)
    return list(reads)


def apply_delivered(book: OwnerBook, turn: str, now: datetime) -> list[Entry]:
    """Mark what `turn` read as delivered; only after that turn answered (the caller's promise, R28)."""
    delivered: list[Entry] = []
    for helper_id in book.turn_reads.pop(turn, []):
        entry = book.entries.get(helper_id)
        if entry is None or entry.state is not RowState.UNREPORTED:
            continue
        entry.state = RowState.DELIVERED
        entry.delivered_at = now
        entry.keep_until = now + timedelta(milliseconds=book.policy.keep_ms)
        entry.generation += 1
        delivered.append(entry)
    _forget_reads(book, [entry.helper_id for entry in delivered])
    return delivered


def _forget_reads(book: OwnerBook, helper_ids: list[str]) -> None:
    """Turns that read these outcomes and never answered (lost in a restart) have nothing left to deliver."""
    for turn in list(book.turn_reads):
        book.turn_reads[turn] = [h for h in book.turn_reads[turn] if h not in helper_ids]
        if not book.turn_reads[turn]:
            del book.turn_reads[turn]


def remove_entries(book: OwnerBook, helper_ids: list[str]) -> None:
    for helper_id in helper_ids:
        book.entries.pop(helper_id, None)
    _forget_reads(book, helper_ids)
    _note_removed(book, helper_ids)


# --- Retention (R29) -------------------------------------------------------------------------------


def expired_rows(book: OwnerBook, now: datetime) -> list[str]:
    return [
        e.helper_id
        for e in book.entries.values()
        if e.keep_until is not None
        and e.keep_until <= now
        and e.state in (RowState.DELIVERED, RowState.CLOSED)
        and not e.helper_writes
        and not e.holds_slot
    ]


def next_wakeup(book: OwnerBook) -> datetime | None:
    """The earliest retention expiry or lease end: the coordinator keeps one timer for it."""
    moments = [e.keep_until for e in book.entries.values() if e.keep_until and not e.helper_writes]
    moments += [e.lease_until for e in book.entries.values() if e.lease_until]
    return min(moments) if moments else None


# --- Chat outbox (R26) ----------------------------------------------------------------------------


def unannounced(book: OwnerBook) -> list[str]:
    return [e.helper_id for e in book._by_seq() if e.state is RowState.UNREPORTED and not e.announced]


def next_event(book: OwnerBook) -> ChatEventRecord | None:
    """The event to offer now: the one in flight, or a new one for every unannounced outcome."""
    if book.event is not None and book.event.state is not EventState.DELIVERED:
        return book.event
    pending = unannounced(book)
    if not pending:
        return None
    book.event = ChatEventRecord(key=f"helpers-ready:{book.owner}:{book.next_event_seq}", helper_ids=pending)
    book.next_event_seq += 1
    return book.event


def abandon_event(book: OwnerBook) -> None:
    """Give up offering the current event; its outcomes stay unreported for the chat's next instruction."""
    if book.event is None:
        return
    for helper_id in book.event.helper_ids:
        entry = book.entries.get(helper_id)
        if entry is not None:
            entry.announced = True
    book.event = None  # its last attempt's state stays in the store's chat_events


def apply_event_delivered(book: OwnerBook, receipt_id: str) -> None:
    if book.event is None:
        return
    book.event.state = EventState.DELIVERED
    book.event.receipt_id = receipt_id
    for helper_id in book.event.helper_ids:
        entry = book.entries.get(helper_id)
        if entry is not None:
            entry.announced = True


@dataclass
class BookSummary:
    """Counts for logs and the Web UI's current details."""

    open: int
    running: int
    waiting: int
    rows: int
    unreported: int = 0
    ids: dict[str, list[str]] = field(default_factory=dict)


def summarize_book(book: OwnerBook) -> BookSummary:
    entries = list(book.entries.values())
    return BookSummary(
        open=len(book.open_ids()),
        running=len(book.slot_holders()),
        waiting=len(book.queue),
        rows=len(entries),
        unreported=sum(e.state is RowState.UNREPORTED for e in entries),
    )
