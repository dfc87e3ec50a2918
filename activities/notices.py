"""A helper's finished notice, sent to its coordinator by a local activity with the worker's client.

A signal command would cost the helper another workflow task (its workflow may not complete before the
server confirms the signal); from a local activity the notice goes out in the task that finalized the
outcome, and the helper completes in that same task. A repeated notice (the task retried after a worker
died) changes nothing: the coordinator takes a helper's first notice only (`domain.book.apply_finished`).
"""

from __future__ import annotations

import logging

from temporalio import activity
from temporalio.service import RPCError, RPCStatusCode

from domain.activity_io import TellFinished
from protocol.messages import HELPER_FINISHED
from protocol.names import coordinator_id

log = logging.getLogger(__name__)


@activity.defn(name="tell_finished")
async def tell_finished(told: TellFinished) -> bool:
    """The helper's outcome is final: its row and slot pass back to the coordinator. False when there is no
    coordinator (only an operator removes one; the outcome is in the store anyway, and a new coordinator's
    slot lease cannot include this helper)."""
    try:
        await activity.client().get_workflow_handle(coordinator_id(told.owner)).signal(HELPER_FINISHED, told.notice)
    except RPCError as error:
        if error.status is not RPCStatusCode.NOT_FOUND:
            raise  # the server is away: the local activity retries
        log.error("could not tell the coordinator of %s: %s", told.owner, error)
        return False
    return True
