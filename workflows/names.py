"""Workflow ids, signal names and search attributes shared by the workflows, the starter and the servers."""

from __future__ import annotations

from typing import Final

from temporalio.common import SearchAttributeKey

DEFAULT_TASK_QUEUE: Final = "helpers"

# Signals a helper sends to its coordinator. Named, not referenced, so the helper module never
# imports the coordinator module (which starts helpers).
HELPER_FINISHED: Final = "helper_finished"
HELPER_CLOSED: Final = "helper_closed"

HELPER_OWNER = SearchAttributeKey.for_keyword("HelperOwner")
HELPER_STATE = SearchAttributeKey.for_keyword("HelperState")
HELPER_OUTCOME = SearchAttributeKey.for_keyword("HelperOutcome")

# Register these where the server starts: an unregistered attribute fails the workflow task forever.
SEARCH_ATTRIBUTES: Final = {key.name: "Keyword" for key in (HELPER_OWNER, HELPER_STATE, HELPER_OUTCOME)}


def coordinator_id(owner: str) -> str:
    return f"helpers/{owner}/coordinator"


def helper_workflow_id(owner: str, helper_id: str) -> str:
    return f"helpers/{owner}/helper/{helper_id}"
