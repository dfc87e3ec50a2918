"""A record of every wait for the owner (R56): how it ended, who answered as the caller says and through what, and
exactly what the owner was shown, with its SHA-256 digest. The coordinator says how a wait ended (`WaitEnd`, in the
activity that writes the row's change); the store adds what the row showed, in the same transaction, and keeps the
record `HELPER_AUDIT_KEEP_MS` after the end."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

from contracts.core_api import QuestionChoices
from domain.ids import HelperId, OwnerId
from domain.messages.updates import Decider, OwnerAnswer

# How long a wait's record is kept after the wait ended, by default (HELPER_AUDIT_KEEP_MS).
AUDIT_KEEP_MS = 30 * 24 * 3_600_000


class WaitEndKind(StrEnum):
    ANSWERED = "answered"  # a question's answer started its follow-up
    GRANTED = "granted"  # an authorization granted: its follow-up goes on with the item
    DENIED = "denied"  # an authorization denied: nothing was done
    EXPIRED = "expired"  # unanswered at its bound (R54)
    CLOSED = "closed"  # the owner closed the row
    FOLLOWED_UP = "followed_up"  # a follow-up started by hand took its place
    REMOVED = "removed"  # the row was removed to make room for an admission


class WaitKind(StrEnum):
    QUESTION = "question"
    AUTHORIZATION = "authorization"


class OwnerWait(BaseModel):
    """A wait of the owner's that still takes an answer, across helpers: the inbox (R56)."""

    helper_id: HelperId
    kind: WaitKind
    question_id: str = Field(description="the id to answer under ('question' or 'authorization' when none is named)")
    text: str = Field(description="the outcome as the owner is shown it: the question, or the action asked for")
    choices: QuestionChoices | None = None
    asked_at: datetime | None = Field(default=None, description="when the helper asked (its outcome)")
    delivered_at: datetime | None = Field(default=None, description="when a chat turn delivered it; none yet")
    reminders_sent: int = 0
    expires_at: datetime | None = Field(default=None, description="the wait's bound; none before delivery")


class WaitEnd(BaseModel):
    """How one admission's wait ended, as the coordinator's book decided it."""

    helper_id: HelperId
    seq: int
    kind: WaitKind
    question_id: str
    ended: WaitEndKind
    ended_at: datetime
    reminders_sent: int = 0
    answer: OwnerAnswer | None = None
    asked_grant: str | None = Field(default=None, description="Authorization: the item a grant adds, as asked.")
    granted: str | None = Field(default=None, description="Authorization granted: the item it added.")
    decider: Decider = Decider()
    follow_up: HelperId | None = None
    language: str = "en"  # the owner's, for a late answer's refusal


class WaitRecord(WaitEnd):
    """The kept record: the end, and what the row showed the owner when it ended."""

    owner: OwnerId
    session_id: str | None = None
    shown_text: str
    shown_choices: QuestionChoices | None = None
    shown_sha256: str
    asked_at: datetime | None = None
    delivered_at: datetime | None = None


# Records in one page of `audit`.
AUDIT_PAGE_MAX = 200


class AuditCursor(BaseModel):
    """Where a page of `audit` ended: its last record. Travels as an opaque token (`token`, `parse`)."""

    ended_at: datetime
    helper_id: HelperId
    seq: int

    @classmethod
    def after(cls, record: WaitRecord) -> AuditCursor:
        return cls(ended_at=record.ended_at, helper_id=record.helper_id, seq=record.seq)

    def token(self) -> str:
        return base64.urlsafe_b64encode(self.model_dump_json().encode()).decode().rstrip("=")

    @classmethod
    def parse(cls, token: str) -> AuditCursor:
        """Raises ValueError for a token this runtime did not give."""
        try:
            return cls.model_validate_json(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        except (ValueError, binascii.Error) as error:
            raise ValueError("not a page token of audit (give the `next` of the page before)") from error


class AuditPage(BaseModel):
    """A page of `audit`: records newest first, and the token of the next page (none after the last)."""

    owner: OwnerId
    records: list[WaitRecord]
    next: str | None = None


def shown_digest(text: str, choices: QuestionChoices | None) -> str:
    """SHA-256 of exactly what was shown: the outcome's text and the options offered, as canonical JSON."""
    shown = {"text": text, "choices": choices.model_dump(mode="json") if choices is not None else None}
    canonical = json.dumps(shown, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
