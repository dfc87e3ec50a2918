"""The chat bridge's HTTP contract (Iva's side), shared by the client and the reference chat.

    GET  /v1/owners/{owner}/idle            -> 200 IdleAnswer
    PUT  /v1/owners/{owner}/idle            IdleAnswer -> 200 IdleAnswer   (reference chat only: a control)
    POST /v1/owners/{owner}/events          SystemEvent -> 202 EventReceipt
    GET  /v1/owners/{owner}/events          -> 200 list[ReceivedEvent]     (reference chat only)
    GET  /healthz                           -> 200 {"ok": true}

A repeated `key` is harmless: the chat answers with the first receipt and `duplicate: true` (R26).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field


class IdleAnswer(BaseModel):
    idle: bool


EventKind = Literal["ready", "reminder", "expired"]


class SystemEvent(BaseModel):
    """One wake-up for the chat: these helpers have outcomes ready to report (`ready`), a helper still waits for the
    owner's answer (`reminder`), or its wait ended unanswered (`expired`)."""

    key: str = Field(min_length=1, max_length=200, description="Makes a repeat harmless (inbound dedup).")
    helper_ids: list[str] = Field(min_length=1)
    text: str = Field(min_length=1, max_length=2000)
    kind: EventKind = "ready"


class EventReceipt(BaseModel):
    """The chat's evidence that it took the event; `delivered` needs this (R26)."""

    event_id: str
    duplicate: bool
    accepted_at: datetime


class ReceivedEvent(BaseModel):
    event_id: str
    key: str
    helper_ids: list[str]
    text: str
    accepted_at: datetime
    kind: EventKind = "ready"
