"""The messages between the workflows, and from the starter to a coordinator: every name in one place.

A workflow declares its handlers with these names; a sender (`protocol.signal_senders` inside workflows,
`protocol.update_senders` outside) uses the same names with typed arguments and results; an activity is registered
and scheduled under its name here. No other module spells a signal, update or activity name, and a rename here is
a rename everywhere (a replay test guards the recorded ones).
"""

from __future__ import annotations

from typing import Final

from pydantic import BaseModel, Field

from domain.book import OwnerAnswer, OwnerBook
from domain.ids import HelperId, OwnerId
from domain.limits import ANSWER_CHARS_MAX, READ_MAX_HELPERS, TURN_MAX_CHARS, Policy
from domain.outcome import OutcomeKind
from domain.rows import RowState

COORDINATOR_WORKFLOW: Final = "CoordinatorWorkflow"
HELPER_WORKFLOW: Final = "HelperWorkflow"
GOAL_CHECK_WORKFLOW: Final = "GoalCheckWorkflow"

# Updates a coordinator takes from the starter (and from Goal checks).
ADMIT: Final = "admit"
CLOSE_HELPER: Final = "close"
MARK_READ: Final = "mark_read"
MARK_DELIVERED: Final = "mark_delivered"
ANSWER: Final = "answer"
# Signals a helper sends its coordinator.
HELPER_FINISHED: Final = "helper_finished"
HELPER_CLOSED: Final = "helper_closed"
# Signals a coordinator sends a helper.
SLOT_GRANTED: Final = "slot_granted"
CLOSE: Final = "close"
# Activities, by the names the workflows schedule them under (a test's stand-in registers the same name).
ADMIT_HELPER: Final = "admit_helper"
REGRANT_HELPER: Final = "regrant_helper"
COORDINATOR_WRITE: Final = "coordinator_write"
REMOVE_ROWS: Final = "remove_rows"
OFFER_CHAT_EVENT: Final = "offer_chat_event"
WITHDRAW_CHAT_EVENT: Final = "withdraw_chat_event"
OPEN_SESSION: Final = "open_session"
FOLLOW_SESSION: Final = "follow_session"
FINISH_SESSION: Final = "finish_session"
CANCEL_SESSION: Final = "cancel_session"
RECOVER_SESSION: Final = "recover_session"
RESET_SESSION: Final = "reset_session"
PARK_SESSION: Final = "park_session"
MARK_CLOSED: Final = "mark_closed"
FINALIZE_OUTCOME: Final = "finalize_outcome"
SWEEP_ORPHAN_DIRECTORIES: Final = "sweep_orphan_directories"
RESET_KEPT_SESSIONS: Final = "reset_kept_sessions"
START_GOAL_CHECK: Final = "start_goal_check"
# Queries.
OWNER_BOOK: Final = "owner_book"
COUNTS: Final = "counts"
HELPER_STATUS: Final = "status"


class HelperResult(BaseModel):
    """What a finished helper workflow returns, shown at the top of its page in the Web UI: the outcome and, for
    every outcome but completed, why (the owner-facing explanation). A failed helper's workflow fails instead,
    with the same reason as its message, so the workflow list shows it red."""

    outcome: OutcomeKind
    reason: str = ""


class Token(BaseModel):
    """The argument of the coordinator's signals to a helper. It says nothing; its payload is encrypted, so
    only a sender with the codec keys can make one: a client without them sends a bare signal, or a plaintext
    payload the codec refuses, and the helper ignores it."""


class CoordinatorStart(BaseModel):
    """A coordinator's input: its owner, the policy frozen at its start, and the book on continue-as-new."""

    owner: OwnerId
    policy: Policy = Policy()
    book: OwnerBook | None = None


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


class AnswerRequest(BaseModel):
    """The owner's answer to a helper's question or authorization wait (R49); its checks are
    `domain.book.answer_problems`, made by the starter and again by the coordinator's validator."""

    owner: OwnerId
    helper_id: HelperId
    answer: OwnerAnswer


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


class ReadAnswer(BaseModel):
    owner: str
    turn: str
    read: list[str]
