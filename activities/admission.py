"""The activity that makes an admission durable: the row, then the helper's workflow (R4).

It runs as a local activity inside the coordinator's admission update, so the starter's answer comes only
after both exist. The helper workflow is started with the client, not as a child: a child's start and
completion would add events to the long-lived coordinator and race with its continue-as-new.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.client import WorkflowExecutionStatus
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError

from domain.activity_io import AdmitHelper
from domain.rows import HelperRow, RowState
from store.helper_store import HelperStore
from store.results import ResultDirectories
from workflows.names import HELPER_OWNER, HELPER_STATE, helper_workflow_id

HELPER_WORKFLOW = "HelperWorkflow"
SEQ_MEMO = "seq"


class AdmissionActivities:
    def __init__(self, store: HelperStore, results: ResultDirectories) -> None:
        self.store = store
        self.results = results

    @activity.defn(name="admit_helper")
    async def admit_helper(self, admitted: AdmitHelper) -> None:
        """Write the admitted row at generation 1, then start the helper's workflow; both idempotent."""
        new, start = admitted.row, admitted.start
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
        )
        try:
            await self.store.insert_admitted(row)
        except ValueError as error:
            raise ApplicationError(str(error), non_retryable=True) from None
        await self._start_workflow(admitted)

    async def _start_workflow(self, admitted: AdmitHelper) -> None:
        start = admitted.start
        workflow_id = helper_workflow_id(start.owner, start.helper_id)
        client = activity.client()
        try:
            await client.start_workflow(
                HELPER_WORKFLOW,
                start,
                id=workflow_id,
                task_queue=activity.info().task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                memo={SEQ_MEMO: start.seq},
                search_attributes=TypedSearchAttributes(
                    [
                        SearchAttributePair(HELPER_OWNER, start.owner),
                        SearchAttributePair(
                            HELPER_STATE, (RowState.RUNNING if start.slot_granted else RowState.WAITING).value
                        ),
                    ]
                ),
                static_summary=f"{start.owner} · {start.helper_id} · {start.title}",
            )
        except WorkflowAlreadyStartedError:
            # A retry of this very admission finds its own workflow; an older helper with the same id
            # (its row removed, its cleanup still running) must finish first.
            description = await client.get_workflow_handle(workflow_id).describe()
            memo = await description.memo()
            if memo.get(SEQ_MEMO) == start.seq:
                return
            if description.status is WorkflowExecutionStatus.RUNNING:
                raise ApplicationError(
                    f"an earlier helper {start.helper_id} is still finishing its cleanup", type="PreviousRunActive"
                ) from None
            raise
