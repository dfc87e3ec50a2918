"""What a caller (the starter, a Goal check) asks the coordinator by update, and each update's reply."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from domain.ids import HelperId, OwnerId
from domain.limits import ANSWER_CHARS_MAX, READ_MAX_HELPERS, TURN_MAX_CHARS
from domain.rows import RowState

# A read's and a delivery's owner may be absent from a request recorded in a coordinator's history by an earlier
# starter, which sent it without; the coordinator then takes it as its own.


class ReadRequest(BaseModel):
    owner: OwnerId | None = None
    turn: str = Field(min_length=1, max_length=TURN_MAX_CHARS)
    helper_ids: list[HelperId] = Field(max_length=READ_MAX_HELPERS)


class DeliveredRequest(BaseModel):
    owner: OwnerId | None = None
    turn: str = Field(min_length=1, max_length=TURN_MAX_CHARS)
    answer_chars: int = Field(le=ANSWER_CHARS_MAX)


class OwnerAnswer(BaseModel):
    """The owner's answer to a question or an authorization wait: an offered option's id, or free text. Its
    bounds are checked where it enters (`domain.book.answering.answer_problems`), not when a history is read back."""

    question_id: str
    option_id: str | None = None
    text: str | None = None


# A caller's own words for who answered and through which channel ("owner", "telegram"): short labels.
DECIDER_MAX_CHARS = 64


class Decider(BaseModel):
    """Who answered as the caller says (`by`, `via`), and through what the answer came, as the starter knows it
    (R56). Kept in the wait's record, never judged."""

    by: str | None = None
    via: str | None = None
    through: Literal["api", "cli"] | None = None


class AnswerRequest(BaseModel):
    """The owner's answer to a helper's question or authorization wait (R49); its checks are
    `domain.book.answering.answer_problems`, made by the starter and again by the coordinator's validator."""

    owner: OwnerId
    helper_id: HelperId
    answer: OwnerAnswer
    # A worker of the build before ignores the field (the message takes unknown fields).
    decider: Decider | None = None


# The replies to the coordinator's updates.


class Admission(BaseModel):
    """The reply to `admit` (R4): durable before it is given."""

    owner: str
    helper_id: str
    status: RowState = Field(description="running or waiting; a replayed admission may find it already final")
    ahead: int = 0
    existing: bool = False
    evicted: list[str] = Field(default_factory=list)


class AnswerResult(BaseModel):
    """The reply to `answer` (R49): the one authoritative answer to the helper's question and what goes on from it.

    `repeated`: the question was answered before, and this is that first answer (nothing started now); `same` says
    whether the answer just sent is that one. `follow_up`: the helper that continues the work from the answer, as
    `start` would answer for it; None for `deny`, which starts nothing and delivers the outcome."""

    owner: str
    helper_id: str
    question_id: str
    option_id: str | None = None
    text: str | None = None
    repeated: bool = False
    same: bool = True
    follow_up: Admission | None = None
    asked: str | None = Field(default=None, description="An authorization: the action it asked for.")
    granted: str | None = Field(
        default=None, description="A grant: the action granted, the one asked or a narrowing of it, performed once."
    )


class AnswerRefusedItem(BaseModel):
    code: str = Field(description="as `answer` would fail: a refusal's code, or unavailable, accepted, busy")
    message: str


class AnsweredItem(BaseModel):
    """One answer of `answers`, in the order sent: exactly one of `result` (what `answer` answers) and `error`."""

    helper_id: str
    result: AnswerResult | None = None
    error: AnswerRefusedItem | None = None


class AnswersResult(BaseModel):
    """The reply to `answers` (R56): each answer judged alone, as `answer` judges it."""

    owner: str
    answers: list[AnsweredItem]


class CloseAnswer(BaseModel):
    owner: str
    helper_id: str
    state: RowState
    removed: bool = False
    slot_held: bool = Field(default=False, description="The slot stays held until the core confirms the stop.")
    already_closed: bool = False


class DeliveredAnswer(BaseModel):
    owner: str
    turn: str
    delivered: list[str]


class ChatIdleAnswer(BaseModel):
    """The reply to the chat saying it turned idle (a signal: the coordinator answers nothing back)."""

    owner: str
    told: bool = Field(
        description="An event was waiting for the chat, and the owner's coordinator was told to offer it now."
    )


class ReadAnswer(BaseModel):
    owner: str
    turn: str
    read: list[str]
