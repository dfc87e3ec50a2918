"""The helper row as Iva reads it from the store, and the answers the starter gives."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

from contracts.core_api import Action, QuestionChoices
from domain.boundary import GrantedAction
from domain.limits import Limits
from domain.outcome import OutcomeKind


class RowState(StrEnum):
    WAITING = "waiting"  # admitted, waiting for a running slot
    RUNNING = "running"  # holds a slot; its core session is followed
    UNREPORTED = "unreported"  # finalized, not yet told to the owner
    DELIVERED = "delivered"  # a chat turn read it and answered
    CLOSED = "closed"  # closed by the owner (or its outcome withdrawn)
    EXPIRED = "expired"  # its question or authorization wait ended unanswered at its bound (R54)

    @property
    def is_open(self) -> bool:
        """Admitted and not yet finished or closed (HELPER_MAX_OPEN counts these)."""
        return self in (RowState.WAITING, RowState.RUNNING)


class HelperRow(BaseModel):
    """One helper row: the store's projection of the helper's workflow state."""

    owner: str
    helper_id: str
    seq: int
    goal_id: str | None = None
    state: RowState
    task: str
    boundary: list[str] = Field(default_factory=list)
    language: str
    model: str
    limits: Limits
    session_id: str | None = None
    steps: int = 0
    work_tokens: int = 0
    input_tokens: int = 0
    last_message: str = ""
    outcome_kind: OutcomeKind | None = None
    summary: str | None = None
    actions: list[Action] = Field(default_factory=list)
    result_dir: str
    admitted_at: datetime
    started_at: datetime | None = None
    deadline_at: datetime | None = None
    finished_at: datetime | None = None
    delivered_at: datetime | None = None
    keep_until: datetime | None = None
    generation: int
    updated_at: datetime
    follow_up_of: str | None = None
    followed_up_by: str | None = None
    follow_started_at: datetime | None = None
    choices: QuestionChoices | None = None
    wait_ends_at: datetime | None = None  # a delivered wait's bound (R54)
    wait_reminders_ms: list[int] | None = None  # its reminders, milliseconds after delivery
    granted_action: GrantedAction | None = None  # a grant's follow-up: the action granted, performed at most once (R55)


class HelperView(BaseModel):
    """What `starter list` and `starter show` print for one helper."""

    helper_id: str
    state: RowState
    goal_id: str | None = None
    ahead: int | None = Field(default=None, description="Waiting helpers admitted before this one.")
    steps: int
    work_tokens: int
    input_tokens: int
    model: str
    outcome_kind: OutcomeKind | None = None
    summary: str | None = None
    choices: QuestionChoices | None = Field(
        default=None,
        description="A question outcome's choices: the question's id, the options offered (each an id and a label) "
        "and whether a free-text answer is taken; none for a plain-text question and for every other outcome.",
    )
    admitted_at: datetime
    started_at: datetime | None = None
    follow_started_at: datetime | None = Field(
        default=None,
        description="When a worker began following the session; none while a running helper's follow waits for a "
        "worker's free follow slot.",
    )
    deadline_at: datetime | None = None
    finished_at: datetime | None = None
    delivered_at: datetime | None = None
    result_dir: str
    actions: list[Action] = Field(default_factory=list)
    last_message: str | None = None
    full_text: str | None = None
    session_id: str | None = Field(
        default=None, description="`show` only: the helper's session in the core (GET /v1/sessions/{id} there)."
    )
    follow_up_of: str | None = Field(default=None, description="The earlier helper whose outcome this one continues.")
    followed_up_by: str | None = Field(default=None, description="The helper that continues this one's outcome.")
    granted_action: GrantedAction | None = Field(
        default=None,
        description="A grant's follow-up: the action the owner granted, performed at most once, beside the one asked.",
    )
