"""Typed senders to an owner's coordinator, for every client outside the workflows: the starter, Goal checks.

Admission goes by update-with-start: the one way a helper enters the runtime (R4). The other updates take
and return the models named here; their names come from `protocol.messages`.
"""

from __future__ import annotations

import uuid
from typing import TypeVar

from pydantic import BaseModel
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowUpdateFailedError
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy
from temporalio.service import RPCError

from config.settings import Settings
from domain.requests import HelperRequest
from domain.rows import Admission, CloseAnswer, DeliveredAnswer, ReadAnswer
from protocol.errors import Unavailable, refusal_of
from protocol.messages import (
    ADMIT,
    CLOSE_HELPER,
    COORDINATOR_WORKFLOW,
    MARK_DELIVERED,
    MARK_READ,
    CoordinatorStart,
    DeliveredRequest,
    ReadRequest,
)
from protocol.names import HELPER_OWNER, coordinator_id, owner_priority
from protocol.retry import retrying

Answer = TypeVar("Answer", bound=BaseModel)


async def admit(temporal: Client, settings: Settings, request: HelperRequest) -> Admission:
    """Admit one helper through its owner's coordinator, starting the coordinator on first use.

    When this returns, the row exists and the helper's workflow runs; the answer says whether it runs
    now or waits, and how many are ahead. Raises HelperRefused, InvalidRequest or Unavailable.
    """

    def start() -> WithStartWorkflowOperation[None, None]:
        # An operation is used once: every attempt needs its own.
        return WithStartWorkflowOperation(
            COORDINATOR_WORKFLOW,
            CoordinatorStart(owner=request.owner, policy=settings.policy),
            id=coordinator_id(request.owner),
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            task_queue=settings.task_queue,
            search_attributes=TypedSearchAttributes([SearchAttributePair(HELPER_OWNER, request.owner)]),
            static_summary=f"coordinator of {request.owner}'s helpers",
            priority=owner_priority(request.owner),
        )

    try:
        return await retrying(
            lambda: temporal.execute_update_with_start_workflow(
                ADMIT,
                request,
                result_type=Admission,
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


async def close_helper(temporal: Client, owner: str, helper_id: str) -> CloseAnswer:
    return await _update(temporal, owner, CLOSE_HELPER, helper_id, CloseAnswer)


async def mark_read(temporal: Client, owner: str, request: ReadRequest) -> ReadAnswer:
    return await _update(temporal, owner, MARK_READ, request, ReadAnswer)


async def mark_delivered(temporal: Client, owner: str, request: DeliveredRequest) -> DeliveredAnswer:
    return await _update(temporal, owner, MARK_DELIVERED, request, DeliveredAnswer)


async def _update(temporal: Client, owner: str, name: str, argument: object, answer: type[Answer]) -> Answer:
    """One update to the owner's coordinator, asked again while it continues as new (all are idempotent)."""
    handle = temporal.get_workflow_handle(coordinator_id(owner))
    return await retrying(lambda: handle.execute_update(name, argument, result_type=answer))
