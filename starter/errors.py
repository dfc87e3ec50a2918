"""The starter's one exception hierarchy: what did not happen, a machine-readable code, and why."""

from __future__ import annotations

from typing import Any

from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from domain.owner_book import RefusalCode

# The ApplicationError type the coordinator refuses with (workflows.coordinator.REFUSED).
REFUSED_TYPE = "HelperRefused"


class StarterError(Exception):
    """A starter operation did not happen; `code` is machine-readable, the message says why."""

    code = "error"
    exit_code = 1

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}

    def as_json(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, **self.details}}


class InvalidRequest(StarterError):
    code = RefusalCode.INVALID_REQUEST.value
    exit_code = 2


class HelperRefused(StarterError):
    """The coordinator refused: too many open, rows full, unknown helper, ..."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message, details)
        self.code = code


class Unavailable(StarterError):
    code = "unavailable"
    exit_code = 3


def refusal_of(error: WorkflowUpdateFailedError) -> StarterError:
    cause = error.cause
    if isinstance(cause, ApplicationError) and cause.type == REFUSED_TYPE:
        details = cause.details[0] if cause.details and isinstance(cause.details[0], dict) else {}
        code = str(details.get("code", "refused"))
        extra = {"open_ids": details["open_ids"]} if details.get("open_ids") else {}
        if code == RefusalCode.INVALID_REQUEST.value:
            return InvalidRequest(cause.message, extra)
        return HelperRefused(code, cause.message, extra)
    if isinstance(cause, ApplicationError):
        return Unavailable(cause.message)
    return Unavailable(str(cause or error))
