"""Which answers of Temporal mean "ask the coordinator again" (R5: asking again is always safe)."""

from __future__ import annotations

import pytest
from temporalio.service import RPCError, RPCStatusCode

from protocol.retry import is_transient


@pytest.mark.parametrize(
    ("message", "status", "transient"),
    [
        ("workflow is closing", RPCStatusCode.FAILED_PRECONDITION, True),
        ("server busy", RPCStatusCode.UNAVAILABLE, True),
        ("aborted", RPCStatusCode.ABORTED, True),
        ("current run not found", RPCStatusCode.NOT_FOUND, True),
        # The task that accepted the update was turned back (seen at continue-as-new under load).
        ("Update was not accepted: unexpected workflow task failure", RPCStatusCode.FAILED_PRECONDITION, True),
        ("namespace not found", RPCStatusCode.NOT_FOUND, False),
        ("invalid argument", RPCStatusCode.INVALID_ARGUMENT, False),
        ("permission denied", RPCStatusCode.PERMISSION_DENIED, False),
    ],
)
def test_transient_answers(message: str, status: RPCStatusCode, transient: bool) -> None:
    assert is_transient(RPCError(message, status, b"")) is transient
