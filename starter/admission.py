"""Admission by update-with-start: the one way a helper enters the runtime (R4), for Iva and for Goal checks."""

from __future__ import annotations

import uuid

from temporalio.client import Client, WithStartWorkflowOperation, WorkflowUpdateFailedError
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy
from temporalio.service import RPCError

from domain.requests import HelperRequest
from domain.rows import Admission
from domain.settings import Settings
from starter.errors import Unavailable, refusal_of
from starter.retry import retrying
from workflows.coordinator import CoordinatorStart, CoordinatorWorkflow
from workflows.names import HELPER_OWNER, coordinator_id


async def admit(temporal: Client, settings: Settings, request: HelperRequest) -> Admission:
    """Admit one helper through its owner's coordinator, starting the coordinator on first use.

    When this returns, the row exists and the helper's workflow runs; the answer says whether it runs
    now or waits, and how many are ahead. Raises HelperRefused, InvalidRequest or Unavailable.
    """

    def start() -> WithStartWorkflowOperation[CoordinatorWorkflow, None]:
        # An operation is used once: every attempt needs its own.
        return WithStartWorkflowOperation(
            CoordinatorWorkflow.run,
            CoordinatorStart(owner=request.owner, policy=settings.policy),
            id=coordinator_id(request.owner),
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            task_queue=settings.task_queue,
            search_attributes=TypedSearchAttributes([SearchAttributePair(HELPER_OWNER, request.owner)]),
            static_summary=f"coordinator of {request.owner}'s helpers",
        )

    try:
        return await retrying(
            lambda: temporal.execute_update_with_start_workflow(
                CoordinatorWorkflow.admit,
                request,
                start_workflow_operation=start(),
                # A fresh update id: a repeated request reaches the handler, which answers with the helper's
                # current state and starts nothing (R5), instead of a replay of the first answer.
                id=f"admit/{request.helper_id}/{uuid.uuid4().hex}",
            )
        )
    except WorkflowUpdateFailedError as error:
        raise refusal_of(error) from None
    except RPCError as error:
        raise Unavailable(f"Temporal refused the admission: {error.message}") from None
