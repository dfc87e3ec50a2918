"""What Temporal's answers to a starter write mean: ask again in a moment, busy, or not taken (R5, R48).

The errors are built as the server sends them: a gRPC status with its typed details."""

from __future__ import annotations

import pytest
from google.protobuf.any_pb2 import Any as AnyDetail
from google.protobuf.message import Message
from temporalio.api.common.v1 import GrpcStatus
from temporalio.api.enums.v1 import ResourceExhaustedCause, ResourceExhaustedScope
from temporalio.api.errordetails.v1 import NotFoundFailure, ResourceExhaustedFailure, WorkflowNotReadyFailure
from temporalio.service import RPCError, RPCStatusCode

from protocol.errors import Busy, Unavailable
from protocol.temporal_errors import is_transient, refusal_of_rpc


def server_error(message: str, status: RPCStatusCode, *details: Message) -> RPCError:
    packed = []
    for detail in details:
        any_detail = AnyDetail()
        any_detail.Pack(detail)
        packed.append(any_detail)
    raw = GrpcStatus(code=int(status), message=message, details=packed).SerializeToString()
    return RPCError(message, status, raw)


BUSY_WORKFLOW = ResourceExhaustedFailure(
    cause=ResourceExhaustedCause.RESOURCE_EXHAUSTED_CAUSE_BUSY_WORKFLOW,
    scope=ResourceExhaustedScope.RESOURCE_EXHAUSTED_SCOPE_NAMESPACE,
)
CLOSING = "workflow operation can not be applied because workflow is closing"
ABORTED_BY_CLOSING = "workflow update was aborted by closing workflow"
TASK_FAILED = "Unable to perform workflow execution update due to unexpected workflow task failure."
ADDRESS = "temporal.example:7233"
RATE_LIMITED = ResourceExhaustedFailure(
    cause=ResourceExhaustedCause.RESOURCE_EXHAUSTED_CAUSE_RPS_LIMIT,
    scope=ResourceExhaustedScope.RESOURCE_EXHAUSTED_SCOPE_NAMESPACE,
)


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        # A run closing for continue-as-new, as servers of different versions say it.
        (server_error(CLOSING, RPCStatusCode.RESOURCE_EXHAUSTED, BUSY_WORKFLOW), True),
        (server_error(ABORTED_BY_CLOSING, RPCStatusCode.NOT_FOUND, NotFoundFailure()), True),
        (server_error("workflow is closing", RPCStatusCode.FAILED_PRECONDITION), True),
        (server_error("workflow update was aborted", RPCStatusCode.UNAVAILABLE), True),
        (server_error("aborted", RPCStatusCode.ABORTED), True),
        (server_error("current run not found", RPCStatusCode.NOT_FOUND), True),
        # The task that accepted the update was turned back (seen at continue-as-new under load).
        (server_error(TASK_FAILED, RPCStatusCode.FAILED_PRECONDITION, WorkflowNotReadyFailure()), True),
        # Not the workflow's business: ask later, or not at all.
        (server_error("namespace rate limit exceeded", RPCStatusCode.RESOURCE_EXHAUSTED, RATE_LIMITED), False),
        (server_error("workflow not found for ID: helpers/anna", RPCStatusCode.NOT_FOUND, NotFoundFailure()), False),
        (server_error("namespace not found", RPCStatusCode.NOT_FOUND), False),
        (server_error("some other precondition", RPCStatusCode.FAILED_PRECONDITION), False),
        (server_error("invalid argument", RPCStatusCode.INVALID_ARGUMENT), False),
        (server_error("permission denied", RPCStatusCode.PERMISSION_DENIED), False),
    ],
)  # fmt: skip
def test_which_answers_mean_ask_again(error: RPCError, transient: bool) -> None:
    assert is_transient(error) is transient


def test_rate_limits_are_busy_with_a_retry_after() -> None:
    error = server_error("rate limit", RPCStatusCode.RESOURCE_EXHAUSTED, RATE_LIMITED)
    refusal = refusal_of_rpc(error, "a close", ADDRESS)
    assert isinstance(refusal, Busy)
    assert refusal.retry_after_s > 0
    assert refusal.exit_code == 5


def test_any_other_refusal_is_unavailable_and_says_nothing_was_taken() -> None:
    refusal = refusal_of_rpc(server_error("denied", RPCStatusCode.PERMISSION_DENIED), "a close", ADDRESS)
    assert isinstance(refusal, Unavailable)
    assert refusal.message.startswith("nothing was taken")
    assert "a close" in refusal.message and "PERMISSION_DENIED" in refusal.message


TRANSPORT = "error trying to connect: tcp connect error: Connection refused (os error 111)"


@pytest.mark.parametrize(
    ("status", "says"),
    [
        (RPCStatusCode.UNAVAILABLE, f"Temporal is not reachable at {ADDRESS}."),
        (RPCStatusCode.DEADLINE_EXCEEDED, f"Temporal at {ADDRESS} did not answer in time."),
    ],
)
def test_a_call_that_did_not_reach_temporal_says_where_and_what_to_do_and_keeps_the_transports_words(
    status: RPCStatusCode, says: str
) -> None:
    """The message is what a caller can act on; the transport's own text is the `cause`, not the message."""
    refusal = refusal_of_rpc(server_error(TRANSPORT, status), "the list of schedules", ADDRESS)
    assert isinstance(refusal, Unavailable) and refusal.exit_code == 3
    assert refusal.message == (
        f"nothing was taken: {says} Try again once it answers there (is it running, and does TEMPORAL_ADDRESS name "
        "it?); asking again is safe"
    )
    assert refusal.details["cause"] == f"the list of schedules: {status.name}: {TRANSPORT}"
    assert refusal.as_json()["error"]["cause"] == refusal.details["cause"]
