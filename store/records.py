"""What the store's side tables hold, as the runtime reads them: usage, parked and kept sessions."""

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
