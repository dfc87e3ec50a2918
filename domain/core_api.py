"""The core's HTTP session contract, as pydantic models shared by the client and the reference core.

`docs/contracts.md` describes the same contract in prose. Endpoints (all JSON):

    POST /v1/sessions                       CreateSession        -> 201/200 SessionCreated
    GET  /v1/sessions/{session_id}                               -> 200 Snapshot | 404 Problem
    POST /v1/sessions/{session_id}/finish                        -> 202 Snapshot   (finish now, no tools)
    POST /v1/sessions/{session_id}/cancel                        -> 200 CancelAnswer
    POST /v1/sessions/{session_id}/reset                         -> 200 ResetAnswer (cleanup)
    GET  /healthz                                                -> 200 {"ok": true}

Errors carry a `Problem` body naming what is wrong. A snapshot is finite: a fixed set of fields, the
per-step usage list bounded by the step ceiling, and the actions list bounded by the steps.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class SessionStatus(StrEnum):
    RUNNING = "running"
    QUESTION = "question"  # paused: the model asked the owner something
    AUTHORIZATION = "authorization"  # paused: an action needs authorization the boundary lacks
    COMPLETED = "completed"
    PARTIAL = "partial"  # ended at a ceiling or after finish-now, with a partial outcome
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"  # the core restarted while the turn ran; never replayed

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset(
    {
        SessionStatus.COMPLETED,
        SessionStatus.PARTIAL,
        SessionStatus.FAILED,
        SessionStatus.CANCELLED,
        SessionStatus.INTERRUPTED,
    }
)


class StopReason(StrEnum):
    STEPS = "steps"  # the step ceiling (80th call is already final, without tools)
    INPUT = "input"  # the cumulative input ceiling (4,000,000, including cached input)
    FINISH_NOW = "finish_now"  # the helper asked for a final answer without tools


class SessionLimits(BaseModel):
    model_config = ConfigDict(frozen=True)

    max_steps: int = Field(gt=0)
    max_input_tokens: int = Field(gt=0)


class CreateSession(BaseModel):
    """Start one background turn. The same `idempotency_key` always names the same session (R9)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    idempotency_key: str = Field(min_length=1, max_length=200)
    owner: str = Field(min_length=1, max_length=64)
    helper_id: str = Field(min_length=1, max_length=64)
    task: str = Field(min_length=1)
    boundary: list[str] = Field(default_factory=list)
    language: str = Field(min_length=2, max_length=8)
    model: str = Field(min_length=1, max_length=100)
    limits: SessionLimits


class SessionCreated(BaseModel):
    session_id: str
    created: bool = Field(description="False when the idempotency key named an existing session.")


class StepUsage(BaseModel):
    """Usage of one model call. `input_tokens` is the whole prompt, cached part included."""

    index: int = Field(ge=1)
    input_tokens: int = Field(ge=0)
    cached_input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(ge=0)
    compacted: bool = Field(default=False, description="The context was compacted before this call.")


class Action(BaseModel):
    """An action performed on the owner's behalf: whom it affected, what happened, when (R18)."""

    tool: str
    whom: str
    what: str
    at: datetime


class Authorization(BaseModel):
    action: str = Field(description="The action that needs authorization, as the model named it.")
    reason: str = ""


class SessionOutcome(BaseModel):
    kind: SessionStatus
    text: str
    stop_reason: StopReason | None = None


class Snapshot(BaseModel):
    """The finite durable state of one session, as the helper folds it (R11)."""

    session_id: str
    status: SessionStatus
    steps: list[StepUsage] = Field(default_factory=list)
    input_tokens_total: int = Field(ge=0, description="Cumulative input incl. cached (the core's ceiling).")
    last_message: str = Field(default="", description="The last completed assistant message.")
    question: str | None = None
    authorization: Authorization | None = None
    actions: list[Action] = Field(default_factory=list)
    refusals: list[str] = Field(default_factory=list, description="Actions refused outside the boundary.")
    outcome: SessionOutcome | None = None
    error: str | None = None
    finish_requested: bool = False
    cancel_requested: bool = False


class CancelAnswer(BaseModel):
    stopped: bool = Field(description="True only once the turn has actually stopped.")
    status: SessionStatus


class ResetAnswer(BaseModel):
    reset: bool


class Problem(BaseModel):
    """An error body: a stable code and a message naming what is wrong."""

    code: str
    message: str
