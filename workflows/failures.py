"""What a failed call looks like to workflow code.

An activity's failure reaches the workflow as an `ActivityError` around the error it raised. A local activity's
own failure does not: it arrives as the bare `ApplicationError` the activity raised, and only its timeout as
an `ActivityError` (temporalio 1.35; tests/workflows/test_local_activity_failures.py keeps this true). Code that
waits on a local activity catches `CALL_FAILED`, or a refusal would escape it and fail the workflow.
"""

from __future__ import annotations

from temporalio.exceptions import ActivityError, ApplicationError

CALL_FAILED = (ActivityError, ApplicationError)


def cause_of(error: ActivityError | ApplicationError) -> str:
    """The failure's own message, without the activity wrapper's."""
    cause = _unwrapped(error)
    if isinstance(cause, ApplicationError):
        return cause.message
    return str(cause or error)


def failed_for_good(error: ActivityError | ApplicationError) -> bool:
    """Failed for good (the core refused, or the row is gone): retrying cannot help."""
    cause = _unwrapped(error)
    return isinstance(cause, ApplicationError) and cause.non_retryable


def _unwrapped(error: ActivityError | ApplicationError) -> BaseException | None:
    return error.cause if isinstance(error, ActivityError) else error
