"""Typed senders of the signals between the workflows: a helper tells its coordinator, a coordinator tells a helper.

Signals, because a workflow can send another workflow only a signal, and none of these waits for an answer; callers
outside the workflows send the coordinator updates through `protocol.update_senders`, the other half of the pair.

Workflow code only (they use `temporalio.workflow`). The handlers they reach are declared with the same names
from `protocol.names`, so neither workflow module imports the other.
"""

from __future__ import annotations

from temporalio import workflow

from domain.messages.signals import FinishedNotice, Token
from protocol.names import CLOSE, HELPER_CLOSED, HELPER_FINISHED, SLOT_GRANTED, coordinator_id, helper_workflow_id


async def tell_finished(owner: str, notice: FinishedNotice) -> None:
    """The helper's outcome is final: its row and slot pass back to the coordinator (R8, R19)."""
    await workflow.get_external_workflow_handle(coordinator_id(owner)).signal(HELPER_FINISHED, notice)


async def tell_closed(owner: str, helper_id: str) -> None:
    """A running helper closed its row; it keeps its slot until the core confirms the stop (R7, R21)."""
    await workflow.get_external_workflow_handle(coordinator_id(owner)).signal(HELPER_CLOSED, helper_id)


async def grant_slot(owner: str, helper_id: str) -> None:
    """A waiting helper may run now (R6, R8)."""
    await workflow.get_external_workflow_handle(helper_workflow_id(owner, helper_id)).signal(SLOT_GRANTED, Token())


async def ask_to_close(owner: str, helper_id: str) -> None:
    """The owner closed a helper that still owns its row (R21)."""
    await workflow.get_external_workflow_handle(helper_workflow_id(owner, helper_id)).signal(CLOSE, Token())
