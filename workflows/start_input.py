"""A workflow's start input, read in workflow code so that one a client sent and the worker cannot read ends
the run it starts.

The SDK decodes a typed start input before any workflow code runs, and an error there fails the workflow task,
which the server retries for ever: one request encrypted with the wrong key would wedge that owner's coordinator
(or a Goal's checks). Taken as a `RawValue` and read here, the input of a client's start is judged instead: the
run ends at once with the reason, and the owner's next request starts a fresh one. A run continued as new was
started by a worker of this runtime, so a payload of it this worker cannot read means this replica's keys are
wrong: its task fails, to be retried on another replica or once the keys are fixed, and the run keeps its state.
"""

from __future__ import annotations

from typing import TypeVar

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from codec.encryption import UnreadablePayload
    from protocol.errors import ErrorType

Input = TypeVar("Input")


def read_start(raw: RawValue, kind: type[Input]) -> Input | ApplicationError:
    """The start input, or the failure that ends a run whose client-sent start cannot be read."""
    try:
        value: Input = workflow.payload_converter().from_payload(raw.payload, kind)
        return value
    except UnreadablePayload as error:
        if workflow.info().continued_run_id is not None:
            raise
        return ApplicationError(
            f"the request that started this run cannot be read, so it ends: {error}",
            type=ErrorType.UNREADABLE_REQUEST,
            non_retryable=True,
        )
