"""Retrying the Temporal answers that mean "ask again": the coordinator is continuing as new.

While a coordinator drains its handlers it turns new updates away (CoordinatorBusy), and while it closes
one run and starts the next the server refuses them ("workflow is closing"); a moment later the new run
takes them. Every starter write is idempotent (admission by helper
id, close, read, delivered), so asking again is safe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

# The coordinator's answer while it drains its handlers to continue as new (workflows.coordinator.BUSY).
BUSY_TYPE = "CoordinatorBusy"

T = TypeVar("T")
ATTEMPTS = 40
FIRST_PAUSE = 0.05
LONGEST_PAUSE = 1.0


def is_transient(error: Exception) -> bool:
    if isinstance(error, WorkflowUpdateFailedError):
        return isinstance(error.cause, ApplicationError) and error.cause.type == BUSY_TYPE
    if not isinstance(error, RPCError):
        return False
    return (
        "closing" in error.message
        or error.status in (RPCStatusCode.ABORTED, RPCStatusCode.UNAVAILABLE)
        or (error.status is RPCStatusCode.NOT_FOUND and "run" in error.message.lower())
    )


async def retrying(call: Callable[[], Awaitable[T]]) -> T:
    pause = FIRST_PAUSE
    for _ in range(ATTEMPTS - 1):
        try:
            return await call()
        except (RPCError, WorkflowUpdateFailedError) as error:
            if not is_transient(error):
                raise
        await asyncio.sleep(pause)
        pause = min(pause * 2, LONGEST_PAUSE)
    return await call()
