"""How a coordinator writes an admission: the row, the rows removed for room and the helper's start (R3, R4).
A mixin of `CoordinatorWorkflow`, kept apart so each file says one thing."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.admission import AdmissionActivities
    from activities.rows import RowActivities
    from domain.activity_io import AdmitHelper, RemoveRows, RowToRemove
    from domain.book import Entry, OwnerBook
    from workflows import options

# An admission's decision (its seq, its slot) is committed before its row is written and its helper started:
# the write is an activity, scheduled in the task that accepts the update, so the acceptance and the write's
# command are recorded together or not at all, and a worker killed during the write leaves a decision that the
# retried write carries out (idempotently). Before, the write was a local activity inside the accepting task:
# killed with it, the decision was lost while its row and helper ran on, and the next admission could take the
# seq and the slot (the chaos soak, seed 8: four running). A timer would commit it too, but a 1 ms timer costs
# the starter about 0.9 s on the dev server (bench.helper_rate --parallel 1: 1.0 helpers/s against 11.5).
DECIDED_BEFORE_WRITTEN_PATCH = "admission-decided-before-written"


class CoordinatorAdmission:
    """The admission writes of `CoordinatorWorkflow`; the attributes are the workflow's."""

    book: OwnerBook
    # Helpers whose admission is recorded but whose row and workflow are still being written (see
    # `coordinator_slots.CoordinatorSlots.writing`).
    writing: set[str]

    async def _write_admission(self, admitting: AdmitHelper, evicted: list[Entry], decided_first: bool) -> None:
        """Carry out a decided admission; raises what the write raised (the caller undoes the decision). The helper
        is in `writing` for as long as the write runs, whatever its end."""
        helper_id = admitting.start.helper_id
        if decided_first:
            self.writing.add(helper_id)
            try:
                await workflow.execute_activity_method(
                    AdmissionActivities.admit_helper,
                    admitting.model_copy(update={"evict": self._removal(evicted) if evicted else None}),
                    summary=f"admit {helper_id}: remove {len(evicted)} rows for room, write its row, start it",
                    **options.ADMISSION_WRITE,
                )
            finally:
                self.writing.discard(helper_id)
            return
        # As runs recorded before the patch: local activities inside the task that accepted the update.
        if evicted:
            await workflow.execute_local_activity_method(
                RowActivities.remove_rows, self._removal(evicted), **options.ADMISSION_WRITE
            )
        await workflow.execute_local_activity_method(
            AdmissionActivities.admit_helper, admitting, **options.ADMISSION_WRITE
        )

    def _removal(self, entries: list[Entry]) -> RemoveRows:
        return RemoveRows(owner=self.book.owner, rows=[RowToRemove(helper_id=e.helper_id, seq=e.seq) for e in entries])
