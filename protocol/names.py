"""Every name in one place: the names of the workflows, updates, signals, queries and activities, and the workflow
ids, memo keys and search attributes shared by the workflows, the starter and the servers.

A workflow declares its handlers with these names; a sender (`protocol.signal_senders` inside workflows,
`protocol.update_senders` outside) uses the same names with the messages of `domain.messages`; an activity is
registered and scheduled under its name here. No other module spells a signal, update or activity name, and a
rename here is a rename everywhere (a replay test guards the recorded ones).
"""

from __future__ import annotations

from typing import Final

from temporalio.common import Priority, SearchAttributeKey

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
# The signal the starter sends a coordinator: the owner's chat turned idle, so an event waiting for it is offered
# now rather than after the outbox's backoff.
CHAT_IDLE: Final = "chat_idle"
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
FORGET_WAIT_RECORDS: Final = "forget_wait_records"
START_GOAL_CHECK: Final = "start_goal_check"
# Queries.
OWNER_BOOK: Final = "owner_book"
COUNTS: Final = "counts"
HELPER_STATUS: Final = "status"

# The memo key that names the admission (its seq) that started a helper's run.
SEQ_MEMO: Final = "seq"
# The memo key of a follow-up: the earlier helper whose outcome it continues.
FOLLOW_UP_OF_MEMO: Final = "follow_up_of"

HELPER_OWNER = SearchAttributeKey.for_keyword("HelperOwner")
HELPER_STATE = SearchAttributeKey.for_keyword("HelperState")
HELPER_OUTCOME = SearchAttributeKey.for_keyword("HelperOutcome")

# Register these where the server starts: an unregistered attribute fails the workflow task forever.
SEARCH_ATTRIBUTES: Final = {key.name: "Keyword" for key in (HELPER_OWNER, HELPER_STATE, HELPER_OUTCOME)}


def owner_priority(owner: str) -> Priority:
    """The owner is the fairness key of its workflows' tasks, and so of their activities' (which inherit their
    workflow's priority): on a server with task-queue fairness, one owner's burst is dispatched round-robin with
    the other owners' tasks instead of ahead of them. An owner id fits the key's 64 bytes (domain.ids)."""
    return Priority(fairness_key=owner)


def coordinator_id(owner: str) -> str:
    return f"helpers/{owner}/coordinator"


def owner_of_coordinator(workflow_id: str) -> str:
    return workflow_id.removeprefix("helpers/").removesuffix("/coordinator")


def helper_workflow_id(owner: str, helper_id: str) -> str:
    return f"helpers/{owner}/helper/{helper_id}"


def follows_task_queue(task_queue: str) -> str:
    """The task queue of the follow activities of helpers on `task_queue`. A follow holds its slot for the helper's
    whole run, so follows get a queue (and a worker with slots) of their own: the short activities (admission,
    open, finish, cancel, reset, the chat's offers) never wait for a slot behind them."""
    return f"{task_queue}-follows"
