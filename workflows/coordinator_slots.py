"""Handing out running slots: a mixin of `CoordinatorWorkflow` (R6-R8).

The book decides who gets a slot (`domain.book.grant_slots`); here is how the slot reaches the helper: a signal,
and, when the signal finds no workflow, a look at the helper's row before the slot passes on (R4, R19).
"""

from __future__ import annotations

from collections.abc import Callable

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.admission import AdmissionActivities
    from activities.rows import RowActivities
    from domain.activity_io import CoordinatorWrite, Regranted, RegrantHelper, RowKey
    from domain.book import Entry, OwnerBook, forget_gone_helper, grant_slots
    from domain.rows import RowState
    from protocol.senders import grant_slot
    from workflows import options
    from workflows.failures import CALL_FAILED

# A slot signal that finds no workflow looks at the helper's row before the slot passes on.
REGRANT_FROM_ROW_PATCH = "regrant-from-row"


class CoordinatorSlots:
    """The slot half of `CoordinatorWorkflow`; the attributes are the workflow's."""

    book: OwnerBook
    # Helpers whose admission is committed but whose row and workflow are still being written: a slot they
    # are given meanwhile stays theirs and is signalled once the write is done (there is no workflow yet).
    writing: set[str]
    # Provided by `CoordinatorWorkflow`; declared here so the mixin type-checks without stubs.
    _row_key: Callable[[Entry], RowKey]

    async def _hand_out_slots(self) -> None:
        """Pass every free slot to the next waiting helper at once, by signal (R8)."""
        await self._signal_granted(grant_slots(self.book, workflow.now()))

    async def _signal_granted(self, helper_ids: list[str]) -> None:
        gone = False
        for helper_id in helper_ids:
            if helper_id in self.writing:
                continue
            try:
                await grant_slot(self.book.owner, helper_id)
            except ApplicationError as error:
                regranted = await self._regrant(helper_id)
                if regranted in (Regranted.GRANTED, Regranted.STARTED):
                    continue
                # Only an operator can remove a helper workflow; its row is left for them to read.
                workflow.logger.error(
                    "helper %s/%s is gone (%s); its slot passes on", self.book.owner, helper_id, error
                )
                entry = forget_gone_helper(self.book, helper_id, workflow.now())
                if entry is not None and regranted is Regranted.ENDED:
                    await self._close_ended_row(entry)
                gone = True
        if gone:
            await self._hand_out_slots()

    async def _regrant(self, helper_id: str) -> Regranted | None:
        """The slot's signal found no workflow: an admission whose start was lost (or not yet made) still has
        its row, from which the helper is started holding the slot; only a helper that really ended lets
        its slot pass on. None: the row could not be read (or a coordinator from before this look)."""
        entry = self.book.entries.get(helper_id)
        if entry is None or not workflow.patched(REGRANT_FROM_ROW_PATCH):
            return None
        try:
            regranted = await workflow.execute_local_activity_method(
                AdmissionActivities.regrant_helper,
                RegrantHelper(owner=self.book.owner, helper_id=helper_id, seq=entry.seq, policy=self.book.policy),
                **options.ADMISSION_WRITE,
            )
        except CALL_FAILED as error:
            workflow.logger.error("could not look for %s/%s: %s", self.book.owner, helper_id, error)
            return None
        if regranted is Regranted.STARTED:
            workflow.logger.warning("%s/%s had no workflow: started from its row", self.book.owner, helper_id)
        return regranted

    async def _close_ended_row(self, entry: Entry) -> None:
        """A helper whose run ended without finalizing: its row would otherwise stay open for ever. A store that
        does not answer must not fail the handler (from a signal that would fail the coordinator): the row then
        waits for an operator, as it did before."""
        try:
            await workflow.execute_local_activity_method(
                RowActivities.coordinator_write,
                CoordinatorWrite(row=self._row_key(entry), state=RowState.CLOSED, keep_until=entry.keep_until),
                **options.STORE_WRITE,
            )
        except CALL_FAILED as error:
            workflow.logger.error("could not close the row of %s: %s", entry.helper_id, error)
