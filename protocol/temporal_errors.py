"""What Temporal's answers to a starter write mean for its caller, in one place (R48).

A write's caller gets one true answer: its result, `HelperRefused`/`InvalidRequest` (the coordinator said no),
`Busy` (Temporal's own rate limits refused it before taking it), or `Unavailable` (nothing was taken). Some
answers only mean "ask again": the coordinator is continuing as new, and every starter write is idempotent
(admission by helper id, close, read, delivered), so `protocol.update_senders.update_reply` sends it again a moment
later. A NOT_FOUND that is not one of those means no such coordinator: `protocol.update_senders` says what that
answers for each write (an owner without a coordinator has no helpers).
"""

from __future__ import annotations

from typing import Any

from temporalio.api.enums.v1 import ResourceExhaustedCause
from temporalio.api.errordetails.v1 import ResourceExhaustedFailure, WorkflowNotReadyFailure
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from codec.encryption import UnreadablePayload
from protocol.errors import (
    ENCODED_FAILURE,
    INVALID_REQUEST,
    NOT_TAKEN,
    Busy,
    ErrorType,
    HelperRefused,
    InvalidConfiguration,
    InvalidRequest,
    StarterError,
    Unavailable,
)

# Temporal's own back-pressure (a namespace's rate limits) refuses a call before taking it: ask again after this.
SERVER_BUSY_RETRY_S = 2
# The answers of a server whose update reached a run that is closing (continue-as-new) without a typed detail:
# `AbortedByWorkflowClosingErr` (NOT_FOUND) and `ErrWorkflowClosing` (its status differs between server
# versions) say "closing"; a run the server could not resolve as the current one says "run" in a NOT_FOUND.
_CLOSING = "closing"


def is_transient(error: Exception) -> bool:
    """Whether the write was not taken and asking again in a moment will reach a run that takes it."""
    if isinstance(error, WorkflowUpdateFailedError):
        return isinstance(error.cause, ApplicationError) and error.cause.type == ErrorType.COORDINATOR_BUSY
    if not isinstance(error, RPCError):
        return False
    if error.status in (RPCStatusCode.ABORTED, RPCStatusCode.UNAVAILABLE) or _CLOSING in error.message:
        return True
    details = error.grpc_status.details
    if error.status is RPCStatusCode.RESOURCE_EXHAUSTED:
        # The workflow is busy (closing, or too many updates in flight), not the namespace over its rate limits.
        return any(_busy_workflow(detail) for detail in details)
    if error.status is RPCStatusCode.FAILED_PRECONDITION:
        # The workflow task that had accepted the update was turned back (a signal arrived as it completed): the
        # update was not taken, and the next task takes it when asked again.
        return any(detail.Is(WorkflowNotReadyFailure.DESCRIPTOR) for detail in details)
    return error.status is RPCStatusCode.NOT_FOUND and "run" in error.message.lower()


# The statuses of a call that did not reach Temporal or got no answer in time: the transport's word, not the server's.
UNREACHABLE = (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED)


def unreachable(address: str, cause: str, *, timed_out: bool = False) -> Unavailable:
    """Temporal could not be reached (or did not answer in time): the message says what a caller can do, `cause`
    keeps the transport's own words."""
    what = f"Temporal at {address} did not answer in time" if timed_out else f"Temporal is not reachable at {address}"
    return Unavailable(
        f"{NOT_TAKEN}: {what}. Try again once it answers there (is it running, and does TEMPORAL_ADDRESS name it?); "
        "asking again is safe",
        cause=cause,
        shown=(address,),
    )


def refusal_of_rpc(error: RPCError, what: str, address: str) -> StarterError:
    """A refusal Temporal (at `address`) answered before taking the write, or a call that did not reach it."""
    if error.status is RPCStatusCode.RESOURCE_EXHAUSTED:
        return Busy(f"{NOT_TAKEN}: Temporal is over its rate limits ({error.message})", SERVER_BUSY_RETRY_S)
    if error.status in UNREACHABLE:
        cause = f"{what}: {error.status.name}: {error.message}"
        return unreachable(address, cause, timed_out=error.status is RPCStatusCode.DEADLINE_EXCEEDED)
    return Unavailable(f"{NOT_TAKEN}: Temporal refused {what} ({error.status.name}): {error.message}")


def refusal_of(error: WorkflowUpdateFailedError) -> StarterError:
    """What an update the coordinator failed means for its caller."""
    cause = error.cause
    if isinstance(cause, ApplicationError) and cause.type == ErrorType.HELPER_REFUSED:
        details = cause.details[0] if cause.details and isinstance(cause.details[0], dict) else {}
        code = str(details.get("code", "refused"))
        extra = {"open_ids": details["open_ids"]} if details.get("open_ids") else {}
        if code == INVALID_REQUEST:
            return InvalidRequest(cause.message, extra)
        return HelperRefused(code, cause.message, extra)
    if isinstance(cause, ApplicationError) and cause.type == ErrorType.TOO_LATE:
        return Unavailable(f"{NOT_TAKEN}: it reached the runtime after its accept-by time; asking again is safe")
    if isinstance(cause, ApplicationError) and cause.message == ENCODED_FAILURE:
        # The failure was encrypted by the runtime's codec: this client has no key to read it (R39).
        return InvalidConfiguration("the runtime encrypts its payloads and refused this request: set HELPER_CODEC_KEYS")
    unreadable = _unreadable_cause(error)
    if unreadable is not None:
        return InvalidRequest(f"the runtime could not read this request: {unreadable}")
    if isinstance(cause, ApplicationError):
        return Unavailable(cause.message)
    return Unavailable(str(cause or error))


def _unreadable_cause(error: BaseException) -> str | None:
    """Why the runtime could not read the update's input (codec.encryption), if that is why it was refused: the SDK
    wraps the converter's error, a failure typed with its class's name, as the cause of its own "Failed decoding
    arguments"."""
    cause = error.__cause__ or getattr(error, "cause", None)
    while cause is not None:
        if isinstance(cause, ApplicationError) and cause.type == UnreadablePayload.__name__:
            return cause.message
        cause = cause.__cause__ or getattr(cause, "cause", None)
    return None


def _busy_workflow(detail: Any) -> bool:
    failure = ResourceExhaustedFailure()
    return (
        bool(detail.Unpack(failure)) and failure.cause == ResourceExhaustedCause.RESOURCE_EXHAUSTED_CAUSE_BUSY_WORKFLOW
    )
