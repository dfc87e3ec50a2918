"""Workflow ids, search attributes and memo keys shared by the workflows, the starter and the servers."""

from __future__ import annotations

from typing import Final

from temporalio.common import SearchAttributeKey

# The memo key that names the admission (its seq) that started a helper's run.
SEQ_MEMO: Final = "seq"
# The memo key of a follow-up: the earlier helper whose outcome it continues (issue 14).
FOLLOW_UP_OF_MEMO: Final = "follow_up_of"

HELPER_OWNER = SearchAttributeKey.for_keyword("HelperOwner")
HELPER_STATE = SearchAttributeKey.for_keyword("HelperState")
HELPER_OUTCOME = SearchAttributeKey.for_keyword("HelperOutcome")

# Register these where the server starts: an unregistered attribute fails the workflow task forever.
SEARCH_ATTRIBUTES: Final = {key.name: "Keyword" for key in (HELPER_OWNER, HELPER_STATE, HELPER_OUTCOME)}


def coordinator_id(owner: str) -> str:
    return f"helpers/{owner}/coordinator"


def helper_workflow_id(owner: str, helper_id: str) -> str:
    return f"helpers/{owner}/helper/{helper_id}"
