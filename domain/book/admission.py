"""Admission (R2-R5): admit, return the existing helper, or refuse with the reason; and undo a failed one."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TypeAlias

from domain.book import retention
from domain.book.follow_up import decide_follow_up, keeps_context_for, link_follow_up
from domain.book.state import (
    AwaitEarlier,
    Entry,
    Judgement,
    OwnerBook,
    Refusal,
    RefusalCode,
    note_removed,
    other_owner,
    still_working,
)
from domain.limits import WaitPolicy
from domain.requests import HelperRequest, RequestError
from domain.rows import RowState
from domain.texts import text


@dataclass(frozen=True)
class Admit:
    seq: int
    evict: list[str]
    ahead: int


@dataclass(frozen=True)
class AlreadyAdmitted:
    entry: Entry


# Admit it, answer with the helper already admitted under its id (R5), or wait for the helper it follows up.
Verdict: TypeAlias = Admit | AlreadyAdmitted | AwaitEarlier


def judge(book: OwnerBook, request: HelperRequest, *, waited: bool = False) -> Judgement[Verdict]:
    """The whole judgement of an admission, as the coordinator's validator and its handler both make it: the owner,
    the request's own checks against the owner's limits, then the admission rules (`decide`) once the
    helper a follow-up continues has finished or was `waited` for."""
    refusal = other_owner(book, request.owner, request.language)
    if refusal is not None:
        return refusal
    try:
        request.check_against(book.policy.limits, book.policy.keep_ms)
    except RequestError as error:
        return Refusal(code=RefusalCode.INVALID_REQUEST, message=str(error))
    if not waited and request.follow_up is not None and still_working(book, request.follow_up):
        return AwaitEarlier()
    return decide(book, request)


def decide(book: OwnerBook, request: HelperRequest) -> Judgement[Admit | AlreadyAdmitted]:
    """Admit, return the existing helper (R5), or refuse with the reason (R2, R3)."""
    existing = book.entries.get(request.helper_id)
    if existing is not None:
        return AlreadyAdmitted(existing)
    follow_up = decide_follow_up(book, request)
    if isinstance(follow_up, Refusal):
        return follow_up
    if follow_up is not None:  # this outcome was followed up already: the answer names that helper
        return AlreadyAdmitted(follow_up)
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
    evict = rows_to_evict(book, room_needed=1 + reserve, keep=request.follow_up)
    if evict is None:
        code = RefusalCode.GOAL_NEEDS_ROW_PLACE if reserve else RefusalCode.ROWS_FULL
        return Refusal(
            code=code,
            message=text(f"refused.{code.value}", language, helper_id=request.helper_id, max_rows=policy.max_rows),
        )
    return Admit(seq=book.next_seq, evict=evict, ahead=len(book.queue))


def rows_to_evict(book: OwnerBook, room_needed: int, keep: str | None = None) -> list[str] | None:
    """The oldest delivered or closed rows without a Goal to remove so `room_needed` rows fit, or None. `keep`: the
    helper a follow-up continues, whose row the follow-up reads its context from."""
    excess = len(book.entries) + room_needed - book.policy.max_rows
    if excess <= 0:
        return []
    candidates = sorted(
        (
            e
            for e in book.entries.values()
            if retention.evictable(e) and e.helper_id != keep and not keeps_context_for(book, e)
        ),
        key=lambda e: (e.delivered_at or e.finished_at or e.admitted_at, e.seq),
    )
    if len(candidates) < excess:
        return None
    return [e.helper_id for e in candidates[:excess]]


def take(book: OwnerBook, request: HelperRequest, decision: Admit, now: datetime, hard_ceiling_ms: int) -> Entry:
    note_removed(book, [book.entries.pop(helper_id) for helper_id in decision.evict])
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
        follow_up_of=request.follow_up,
        wait=wait_policy(book, request),
    )
    book.entries[entry.helper_id] = entry
    link_follow_up(book, entry, now)
    book.queue.append(entry.helper_id)
    book.next_seq += 1
    book.language = request.language
    return entry


def wait_policy(book: OwnerBook, request: HelperRequest) -> WaitPolicy | None:
    """The request's own wait policy; a follow-up without one takes its earlier helper's (R54); none: the owner's."""
    if request.wait is not None:
        return request.wait
    earlier = book.entries.get(request.follow_up) if request.follow_up is not None else None
    return earlier.wait if earlier is not None else None


def undo(book: OwnerBook, helper_id: str, evicted: list[Entry], earlier: Entry | None = None) -> None:
    """Forget an admission whose row could not be written, so it never holds a place, and put back the rows
    it would have evicted (and the earlier helper it would have followed up, as it was)."""
    book.entries.pop(helper_id, None)
    if helper_id in book.queue:
        book.queue.remove(helper_id)
    for old in evicted:
        book.entries.setdefault(old.helper_id, old)
    if earlier is not None:  # as it was before the follow-up linked and delivered it
        book.entries[earlier.helper_id] = earlier
