"""The activity that makes an admission durable: the row, then the helper's workflow (R4).

It runs as an activity of the coordinator's admission update, scheduled in the task that accepts the update,
so the decision and the write are recorded together and the starter's answer comes only after both exist. The
helper workflow is started with the client, not as a child: a child's start and completion would add events to
the long-lived coordinator and race with its continue-as-new.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio import activity
from temporalio.client import WorkflowExecutionDescription, WorkflowExecutionStatus
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from activities.rows import remove_rows
from domain.book.writes import helper_start
from domain.messages.activities import AdmitHelper, Regranted, RegrantHelper
from domain.messages.signals import Token
from domain.messages.workflows import HelperStart
from domain.rows import HelperRow, RowState
from observability import recording
from protocol.errors import ErrorType
from protocol.names import (
    ADMIT_HELPER,
    CLOSE,
    FOLLOW_UP_OF_MEMO,
    HELPER_OWNER,
    HELPER_STATE,
    HELPER_WORKFLOW,
    REGRANT_HELPER,
    SEQ_MEMO,
    SLOT_GRANTED,
    helper_workflow_id,
    owner_priority,
)
from store.helper_store import HelperStore, RowOfAnotherAdmission
from store.results import ResultDirectories


class AdmissionActivities:
    def __init__(self, store: HelperStore, results: ResultDirectories) -> None:
        self.store = store
        self.results = results

    @activity.defn(name=ADMIT_HELPER)
    async def admit_helper(self, admitted: AdmitHelper) -> None:
        """Remove the rows evicted for room, write the admitted row at generation 1, then start the helper's
        workflow; each idempotent."""
        new, start = admitted.row, admitted.start
        if admitted.evict is not None:
            removed = await remove_rows(self.store, self.results, admitted.evict)
            if removed.directories_left:
                activity.logger.warning("result directories left for the sweep: %s", removed.directories_left)
        request = new.request
        row = HelperRow(
            owner=request.owner,
            helper_id=request.helper_id,
            seq=new.seq,
            goal_id=request.goal_id,
            state=RowState.RUNNING if start.slot_granted else RowState.WAITING,
            task=request.task,
            boundary=list(request.boundary),
            language=request.language,
            model=request.model,
            limits=new.limits,
            result_dir=str(self.results.path_for(request.owner, request.helper_id, new.seq)),
            admitted_at=new.admitted_at,
            generation=1,
            updated_at=new.admitted_at,
            follow_up_of=request.follow_up,
            granted_action=request.granted_action,
        )
        try:
            first_time = await self.store.insert_admitted(row, new.followed_up)
        except RowOfAnotherAdmission as other:
            await self._replace_unrecorded(admitted, row, other.seq)
            first_time = True
        except ValueError as error:
            raise ApplicationError(str(error), non_retryable=True) from None
        recording.admitted(first_time)
        await self._start_workflow(admitted, look_first=not first_time)

    async def _replace_unrecorded(self, admitted: AdmitHelper, row: HelperRow, unrecorded_seq: int) -> None:
        """The row under this id is of an admission the coordinator never recorded: its book would have answered
        with it or refused otherwise. A worker died after writing that row, before the update completed, and the
        owner's next admission took its seq. That row is nobody's: left, it would stay running or waiting for
        ever and refuse this id. If its workflow never started or has ended, this admission takes the row's
        place; if the workflow still runs (without a slot the book counts), it is asked to close first and this
        attempt is refused, to be retried (R4, R19, R38)."""
        workflow_id = helper_workflow_id(row.owner, row.helper_id)
        run = await self._admission_run(workflow_id, unrecorded_seq)
        if run is not None and run.status is WorkflowExecutionStatus.RUNNING:
            await activity.client().get_workflow_handle(workflow_id).signal(CLOSE, Token())
            raise ApplicationError(
                f"an earlier admission of {row.helper_id} (#{unrecorded_seq}) was never recorded and its helper is "
                "still running; it was asked to close",
                type=ErrorType.PREVIOUS_RUN_ACTIVE,
            )
        try:
            replaced_dir = await self.store.replace_unrecorded(row, admitted.row.followed_up, unrecorded_seq)
        except RowOfAnotherAdmission as error:
            raise ApplicationError(str(error)) from None  # changed meanwhile: the retry looks again
        activity.logger.warning(
            "%s/%s: replaced the row of admission #%s, which was never recorded",
            row.owner,
            row.helper_id,
            unrecorded_seq,
        )
        if not await asyncio.to_thread(self.results.remove, Path(replaced_dir)):
            activity.logger.warning("result directory %s left for the sweep", replaced_dir)

    async def _start_workflow(self, admitted: AdmitHelper, *, look_first: bool) -> None:
        start = admitted.start
        workflow_id = helper_workflow_id(start.owner, start.helper_id)
        # Look before starting when this admission's row was already there: a worker killed after this start
        # but before the coordinator recorded the admission replays it, and by then the helper may even have
        # completed, when a duplicate start would succeed and run the helper twice (R9, R19). The memo's seq
        # names the admission that started a run. A row written just now means no earlier attempt got as far
        # as the start, so the look (one more server round trip per helper) is left out; an earlier helper
        # under the same id still running is caught by the start's conflict below.
        if look_first and await self._already_started(workflow_id, start.seq):
            await self._slot_to_earlier_start(workflow_id, start)
            return
        try:
            await _start(start, _memo(start.seq, admitted.row.request.follow_up))
        except WorkflowAlreadyStartedError:
            if not await self._already_started(workflow_id, start.seq):
                raise
            await self._slot_to_earlier_start(workflow_id, start)

    async def _slot_to_earlier_start(self, workflow_id: str, start: HelperStart) -> None:
        """An earlier attempt of this admission started the run, maybe told to wait: the attempt that counts
        (replayed after a worker died) may have found a slot free meanwhile (a helper finished), so the run is
        given it now. A second slot signal changes nothing for a run that has its slot."""
        if not start.slot_granted:
            return
        try:
            await activity.client().get_workflow_handle(workflow_id).signal(SLOT_GRANTED, Token())
        except RPCError as error:
            if error.status is not RPCStatusCode.NOT_FOUND:
                raise
            # The run has already ended (it finished before this admission was recorded): its notice counts.

    @activity.defn(name=REGRANT_HELPER)
    async def regrant_helper(self, regrant: RegrantHelper) -> Regranted:
        """The coordinator's slot signal found no workflow for a helper it admitted. Its row decides: still
        waiting or running, the admission's workflow is signalled if it now runs, or started from the row if
        it never was (an admission whose start was lost must not leave a row waiting forever, R4, R19)."""
        row = await self.store.get(regrant.owner, regrant.helper_id)
        if row is None or row.seq != regrant.seq or row.state not in (RowState.WAITING, RowState.RUNNING):
            return Regranted.GONE
        workflow_id = helper_workflow_id(regrant.owner, regrant.helper_id)
        handle = activity.client().get_workflow_handle(workflow_id)
        for _ in range(2):  # a second look if the admission's own start won the race with ours
            run = await self._admission_run(workflow_id, regrant.seq)
            if run is not None:
                if run.status is not WorkflowExecutionStatus.RUNNING:
                    return Regranted.ENDED  # an operator terminated it: nothing to run, its row is closed
                await handle.signal(SLOT_GRANTED, Token())
                return Regranted.GRANTED
            start = helper_start(regrant.policy, row, seq=row.seq, limits=row.limits, slot_granted=True)
            try:
                await _start(start, _memo(row.seq, row.follow_up_of))
            except WorkflowAlreadyStartedError:
                continue
            activity.logger.warning("%s/%s had no workflow; started from its row", row.owner, row.helper_id)
            return Regranted.STARTED
        raise ApplicationError(f"{workflow_id} neither starts nor answers; try again")

    async def _already_started(self, workflow_id: str, seq: int) -> bool:
        return await self._admission_run(workflow_id, seq) is not None

    async def _admission_run(self, workflow_id: str, seq: int) -> WorkflowExecutionDescription | None:
        """The latest run under this id if this admission started it (the memo's seq), running or ended; None
        if there is none or it is an ended one of an older helper with the same id. An older helper still
        running (its row removed, its cleanup still going) must finish first."""
        try:
            description = await activity.client().get_workflow_handle(workflow_id).describe()
        except RPCError as error:
            if error.status is RPCStatusCode.NOT_FOUND:
                return None
            raise
        memo = await description.memo()
        if memo.get(SEQ_MEMO) == seq:
            return description
        if description.status is WorkflowExecutionStatus.RUNNING:
            raise ApplicationError(
                f"an earlier helper under {workflow_id} is still finishing its cleanup",
                type=ErrorType.PREVIOUS_RUN_ACTIVE,
            )
        return None


async def _start(start: HelperStart, memo: dict[str, object]) -> None:
    state = RowState.RUNNING if start.slot_granted else RowState.WAITING
    await activity.client().start_workflow(
        HELPER_WORKFLOW,
        start,
        id=helper_workflow_id(start.owner, start.helper_id),
        task_queue=activity.info().task_queue,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
        memo=memo,
        search_attributes=TypedSearchAttributes(
            [SearchAttributePair(HELPER_OWNER, start.owner), SearchAttributePair(HELPER_STATE, state.value)]
        ),
        static_summary=f"{start.owner} · {start.helper_id} · {start.title}",
        priority=owner_priority(start.owner),
    )


def _memo(seq: int, follow_up_of: str | None) -> dict[str, object]:
    """The admission's seq names the run it started; a follow-up also names the helper it continues, so the
    Web UI shows the link."""
    memo: dict[str, object] = {SEQ_MEMO: seq}
    if follow_up_of is not None:
        memo[FOLLOW_UP_OF_MEMO] = follow_up_of
    return memo
