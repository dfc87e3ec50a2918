"""Workflow ids, search attributes and memo keys shared by the workflows, the starter and the servers."""

from __future__ import annotations

from typing import Final

from temporalio.common import Priority, SearchAttributeKey

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
