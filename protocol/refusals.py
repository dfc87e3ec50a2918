"""Counting refused admissions: the coordinator's `admit` update (protocol.names.ADMIT) refuses in its validator
(or, rarely, in its handler), which is workflow code, so the count is taken by a worker interceptor around it,
never by the workflow itself; the count goes to observability.recording.

Replay cannot count twice: Temporal runs an update's validator only when the update first arrives, never on
replay, and a refusal raised by the handler is counted only when the workflow is not replaying. Admitted
helpers are counted where their row is written (activities/admission.py).
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    HandleUpdateInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from observability import recording
from protocol.errors import ErrorType
from protocol.names import ADMIT


def refusal_reason(update: str, error: BaseException) -> str | None:
    """The refusal code if `error` is the admit update's refusal, else None."""
    if update != ADMIT or not isinstance(error, ApplicationError) or error.type != ErrorType.HELPER_REFUSED:
        return None
    details = error.details[0] if error.details else None
    code = details.get("code") if isinstance(details, dict) else None
    return str(code) if code else recording.OTHER


class _CountRefusals(WorkflowInboundInterceptor):
    def handle_update_validator(self, input: HandleUpdateInput) -> None:
        try:
            self.next.handle_update_validator(input)
        except Exception as error:
            if (reason := refusal_reason(input.update, error)) is not None:
                recording.refused(reason)
            raise

    async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
        try:
            return await self.next.handle_update_handler(input)
        except Exception as error:
            reason = refusal_reason(input.update, error)
            if reason is not None and not workflow.unsafe.is_replaying():
                recording.refused(reason)
            raise


class AdmissionRefusals(Interceptor):
    """Give to the Worker's `interceptors`; it only watches the admit update and never changes what it does."""

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        return _CountRefusals
