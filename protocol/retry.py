"""The Temporal answers that mean "ask again": the coordinator is continuing as new.

While a coordinator drains its handlers it turns new updates away (CoordinatorBusy), and while it closes
one run and starts the next the server refuses them ("workflow is closing"); a moment later the new run
takes them. Every starter write is idempotent (admission by helper id, close, read, delivered), so asking
again is safe: `protocol.client.answered` does, with these pauses, until the write's answer is due.
"""

from __future__ import annotations

from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from protocol.errors import ErrorType

FIRST_PAUSE = 0.05
LONGEST_PAUSE = 1.0


def is_transient(error: Exception) -> bool:
    if isinstance(error, WorkflowUpdateFailedError):
        return isinstance(error.cause, ApplicationError) and error.cause.type == ErrorType.COORDINATOR_BUSY
    if not isinstance(error, RPCError):
        return False
    return (
        "closing" in error.message
        or error.status in (RPCStatusCode.ABORTED, RPCStatusCode.UNAVAILABLE)
        or (error.status is RPCStatusCode.NOT_FOUND and "run" in error.message.lower())
        # The workflow task that had accepted the update was turned back (UnhandledCommand: a signal arrived
        # as it completed): the update was not taken, and the next task will take it when asked again.
        or (error.status is RPCStatusCode.FAILED_PRECONDITION and "workflow task failure" in error.message.lower())
    )
