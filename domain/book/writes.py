"""What the coordinator writes, from its book: the activity messages of an admission (the row, with the earlier row a
follow-up continues; the helper's start; the rows evicted for room) and the rows it writes or removes later."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from domain.audit import WaitEnd, WaitEndKind
from domain.book import audit
from domain.book.state import Entry, OwnerBook
from domain.limits import Limits, Policy
from domain.messages.activities import FollowedUp, NewRow, RemoveRows, RowKey, RowToRemove
from domain.messages.workflows import HelperStart
from domain.requests import HelperRequest


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


def entry_row(owner: str, entry: Entry) -> RowKey:
    """The row of a book entry, at the generation the coordinator writes it with."""
    return RowKey(owner=owner, helper_id=entry.helper_id, seq=entry.seq, generation=entry.generation)


def rows_to_remove(
    owner: str, entries: list[Entry], at: datetime, ended_as: WaitEndKind = WaitEndKind.REMOVED
) -> RemoveRows:
    """Rows to remove, with the record of each wait their removal ends (`ended_as`: removed for room, or closed)."""
    return RemoveRows(
        owner=owner,
        rows=[RowToRemove(helper_id=e.helper_id, seq=e.seq) for e in entries],
        ended=audit.ended_by_removal(entries, ended_as, at),
    )


def new_row(
    book: OwnerBook, request: HelperRequest, entry: Entry, limits: Limits, now: datetime, ended: WaitEnd | None = None
) -> NewRow:
    """The admission's row write; a follow-up's carries the earlier row as the admission left it, and the record of
    the wait it ended."""
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
            ended=ended,
        )
    return NewRow(request=request, seq=entry.seq, limits=limits, admitted_at=now, followed_up=followed_up)
