"""What the store's side tables hold, as the starter and the tests read them: usage, chat events, parked
sessions."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel


class UsageLine(BaseModel):
    """One helper's usage with its model (R31); kept after the row expires."""

    helper_id: str
    seq: int
    goal_id: str | None
    model: str
    outcome_kind: str
    steps: int
    work_tokens: int
    input_tokens: int
    started_at: datetime | None
    finished_at: datetime


class ChatEvent(BaseModel):
    """A system event offered to the chat, with its delivery state (R26)."""

    key: str
    owner: str
    helper_ids: list[str]
    state: str
    attempts: int
    receipt_id: str | None
    last_error: str | None
    updated_at: datetime


class ParkedSession(BaseModel):
    """A core session whose cleanup reset failed (R20)."""

    session_id: str
    owner: str
    helper_id: str
    error: str
    parked_at: datetime


class KeptSession(BaseModel):
    """A session kept for a follow-up until its cleanup reset."""

    session_id: str
    owner: str
    helper_id: str
    seq: int
    kept_at: datetime
