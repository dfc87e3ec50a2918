"""Each workflow's start input and result. A Goal check starts from its `domain.goals.Goal` and returns its
activity's `GoalCheckResult` (`domain.messages.activities`)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from domain.book import OwnerBook
from domain.ids import GoalId, HelperId, OwnerId
from domain.limits import FollowTuning, Limits, Policy
from domain.outcome import OutcomeKind


class CoordinatorStart(BaseModel):
    """A coordinator's input: its owner, the policy frozen at its start, and the book on continue-as-new."""

    owner: OwnerId
    policy: Policy = Policy()
    book: OwnerBook | None = None


class HelperStart(BaseModel):
    """A helper workflow's input, set by the coordinator at admission."""

    owner: OwnerId
    helper_id: HelperId
    seq: int
    goal_id: GoalId | None = None
    language: str
    model: str
    boundary: tuple[str, ...] = Field(
        default=(), description="The request's boundary: a question's answer admits its follow-up with it (R49)."
    )
    limits: Limits
    slot_granted: bool
    summary_max: int
    check_ms: int
    keep_ms: int | None = Field(default=None, description="The owner's HELPER_KEEP_MS (None: the worker's).")
    follow: FollowTuning
    title: str = Field(description="First line of the task, shown in the Web UI.")


class HelperResult(BaseModel):
    """What a finished helper workflow returns, shown at the top of its page in the Web UI: the outcome and, for
    every outcome but completed, why (the owner-facing explanation). A failed helper's workflow fails instead,
    with the same reason as its message, so the workflow list shows it red."""

    outcome: OutcomeKind
    reason: str = ""
