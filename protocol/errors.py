"""Errors across the protocol: the ApplicationError types workflows and activities raise, and the one
exception hierarchy a client sees (what did not happen, a machine-readable code, why, and an exit code)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from domain.texts import text

# What a failure's message reads when its real message travels encrypted.
ENCODED_FAILURE = "Encoded failure"
# How an answer says that a write was not taken and will not be.
NOT_TAKEN = "nothing was taken"


class ErrorType(StrEnum):
    """`ApplicationError.type` values: raised in one place, matched in another, spelled only here."""

    HELPER_REFUSED = "HelperRefused"  # a coordinator refused an update (limits, unknown helper, ...)
    COORDINATOR_BUSY = "CoordinatorBusy"  # a coordinator drains to continue as new: ask again
    TOO_LATE = "TooLate"  # an update reached its coordinator after its accept-by time: not taken
    ADMISSION_FAILED = "AdmissionFailed"  # the store or the server did not answer during an admission
    PREVIOUS_RUN_ACTIVE = "PreviousRunActive"  # an older helper with the same id still cleans up
    CORE_REJECTED = "CoreRejected"  # the core refused the request (4xx): not retried
    CORE_UNAVAILABLE = "CoreUnavailable"  # the core is slow, down or restarting: retried
    CORE_PROTOCOL_ERROR = "CoreProtocolError"  # the core answered outside the contract: retried
    FOLLOW_WINDOW_ELAPSED = "FollowWindowElapsed"  # a follow attempt ended its window: resumed
    WORKER_STOPPING = "WorkerStopping"  # a follow attempt ended as its worker shuts down: resumed on another
    FOLLOW_SUPERSEDED = "FollowSuperseded"  # a frozen replica's follow attempt, started again elsewhere meanwhile
    INVALID_GOAL = "InvalidGoal"  # a Goal's stored request no longer validates
    UNAVAILABLE = "Unavailable"  # a Goal check could not reach its coordinator
    HELPER_FAILED = "HelperFailed"  # a helper's outcome is failed: its workflow ends failed, with the reason
    UNREADABLE_REQUEST = "UnreadableRequest"  # a run's start input cannot be read (codec keys): the run ends


class StarterError(Exception):
    """A starter operation did not happen; `code` is machine-readable, the message says why. Each kind is one row
    of the contract (docs/api.md): its exit code for the console script and its HTTP status for the service."""

    code = "error"
    exit_code = 1
    http_status = 409

    def __init__(self, message: str, details: dict[str, Any] | None = None, *, shown: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}
        # Configured values (never a caller's input) the message shows whole however long: the store's address.
        self.shown = shown

    def as_json(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, **self.details}}


# RefusalCode.INVALID_REQUEST and UNKNOWN_HELPER, spelled out so the starter's reads do not load the owner
# book (a test keeps them equal).
INVALID_REQUEST = "invalid_request"
UNKNOWN_HELPER = "unknown_helper"
UNKNOWN_GOAL = "unknown_goal"
# The starter's own refusals, beside the coordinator's (domain.book.RefusalCode).
GOAL_EXISTS = "goal_exists"


class InvalidRequest(StarterError):
    """The request breaks a limit; nothing was written. It always carries `problems` (docs/api.md), one line per
    field, each naming it: those given, else its message as the one problem."""

    code = INVALID_REQUEST
    exit_code = 2
    http_status = 422

    def __init__(self, message: str, details: dict[str, Any] | None = None, *, shown: tuple[str, ...] = ()) -> None:
        super().__init__(message, {"problems": [message], **(details or {})}, shown=shown)


class InvalidConfiguration(StarterError):
    """The starter's own environment is wrong (a bad HELPER_* variable): an operator must fix it, and asking
    again unchanged will not help, so it is exit 2 like an invalid request, with its own code (R42)."""

    code = "invalid_configuration"
    exit_code = 2
    http_status = 500


class HelperRefused(StarterError):
    """The coordinator refused: too many open, rows full, unknown helper, ...; what is not there is 404."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message, details)
        self.code = code
        self.http_status = 404 if code in (UNKNOWN_HELPER, UNKNOWN_GOAL) else 409


def unknown_helper(helper_id: str) -> HelperRefused:
    """A helper the owner does not have, in the coordinator's words (English: the starter reads no owner's
    language)."""
    return HelperRefused(UNKNOWN_HELPER, text("refused.unknown_helper", "en", helper_id=helper_id))


class Unavailable(StarterError):
    """Nothing was taken: the store or Temporal did not answer, or did not accept the write within its bound (and
    will not take it later, protocol.deadlines). Asking again is safe; `retry_after_s`, when given, says when. The
    message says what a caller can do; `cause`, when given, keeps the failure underneath in its own words (the
    transport's, the driver's, the server's), for whoever reads the logs."""

    code = "unavailable"
    exit_code = 3
    http_status = 503

    def __init__(
        self,
        message: str,
        details: dict[str, Any] | None = None,
        *,
        retry_after_s: int | None = None,
        shown: tuple[str, ...] = (),
        cause: str | None = None,
    ):
        retry = {"retry_after_s": retry_after_s} if retry_after_s else {}
        underneath = {"cause": cause} if cause else {}
        super().__init__(message, {**(details or {}), **underneath, **retry}, shown=shown)
        self.retry_after_s = retry_after_s


class Accepted(StarterError):
    """Temporal accepted the write, so it is durable and will be carried out, but its answer did not come within the
    bound: the caller looks at the helper (`show`, `watch`) or asks again, which answers with the same helper."""

    code = "accepted"
    exit_code = 4
    http_status = 202

    def as_json(self) -> dict[str, Any]:
        return {"pending": {"code": self.code, "message": self.message, **self.details}}


class Busy(StarterError):
    """Refused before anything was sent: the runtime has more writes in flight than it can answer within their
    bound. Ask again after `retry_after_s`, which grows with the backlog, so that retries do not storm."""

    code = "busy"
    exit_code = 5
    http_status = 429

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message, {"retry_after_s": retry_after_s})
        self.retry_after_s = retry_after_s
