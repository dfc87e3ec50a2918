"""Follow-ups in a coordinator's admission (issue 14): a mixin of `CoordinatorWorkflow`.

The rules are the book's (`domain.book.follow_up`); here is what the workflow adds: a bounded wait for the
earlier helper's notice, a copy of the earlier entry to put back if the admission fails, and the link the
admission's store write carries.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from domain.activity_io import FollowedUp, NewRow
    from domain.book import Entry, OwnerBook
    from domain.limits import Limits
    from domain.requests import HelperRequest

# How long a follow-up's admission waits for the earlier helper's finished notice before it refuses the
# follow-up as "still working" (the notice trails the row's outcome by one workflow task).
EARLIER_OUTCOME_WAIT = timedelta(seconds=5)


class CoordinatorFollowUps:
    """The follow-up half of `CoordinatorWorkflow`'s admission; the attributes are the workflow's."""

    book: OwnerBook

    async def _earlier_outcome(self, earlier_id: str) -> None:
        """The helper a follow-up continues writes its outcome to the row a moment before its notice arrives
        here; Iva may have read the outcome already. Wait (bounded) for the notice, so an answer that follows
        a visible outcome is not refused as "still working"."""
        if self._still_working(earlier_id):
            with contextlib.suppress(asyncio.TimeoutError):
                await workflow.wait_condition(lambda: not self._still_working(earlier_id), timeout=EARLIER_OUTCOME_WAIT)

    def _still_working(self, earlier_id: str) -> bool:
        earlier = self.book.entries.get(earlier_id)
        return earlier is not None and earlier.state.is_open and not earlier.close_requested

    def _earlier_of(self, request: HelperRequest) -> Entry | None:
        """A copy of the helper a follow-up continues, as it is before the admission links it."""
        earlier = self.book.entries.get(request.follow_up) if request.follow_up else None
        return None if earlier is None else earlier.model_copy(deep=True)

    def _new_row(self, request: HelperRequest, entry: Entry, limits: Limits, now: datetime) -> NewRow:
        """The admission's row write; a follow-up's carries the earlier row as the admission left it."""
        return NewRow(
            request=request, seq=entry.seq, limits=limits, admitted_at=now, followed_up=self._followed_up(entry)
        )

    def _followed_up(self, entry: Entry) -> FollowedUp | None:
        earlier = self.book.entries.get(entry.follow_up_of) if entry.follow_up_of else None
        if earlier is None:
            return None
        return FollowedUp(
            helper_id=earlier.helper_id,
            seq=earlier.seq,
            generation=earlier.generation,
            state=earlier.state,
            delivered_at=earlier.delivered_at,
            keep_until=earlier.keep_until,
        )
