"""What a session snapshot means for its helper (R11, R13, R16, R17, R24): pure decisions.

The follow activity polls the core and calls `judge` on every snapshot; it returns to the workflow
only when `judge` says the workflow must decide. The helper's ending table (`domain.run.ending.decide`) maps
the result to one outcome. The follow's input, cursor and result are messages
(`domain.messages.activities`).
"""

from __future__ import annotations

from contracts.core_api import Action, SessionStatus, Snapshot
from domain.bounds import (
    PAYLOAD_ACTIONS_MAX,
    PAYLOAD_ITEM_TEXT_MAX,
    PAYLOAD_REFUSALS_MAX,
    PAYLOAD_TEXT_MAX,
    cut,
    first,
)
from domain.limits import HELPER_BOUNDARY_ITEM_MAX_CHARS
from domain.messages.activities import FollowResult, Verdict
from domain.work import Usage, fold_usage


def next_read_waits(long_polled: bool, changed: bool, elapsed_ms: float, wait_ms: int) -> bool:
    """Whether the follow may ask again at once (True) or must pause `poll_ms` first (False).

    After a long-poll read that brought a change, or that the core held for at least half the wait, the next
    read goes out at once: the core does the waiting. A core that answers a long poll at once with nothing new
    (it advertises versions but ignores the wait) is paced like a polled core, never spun (R44)."""
    return long_polled and (changed or elapsed_ms >= wait_ms / 2)


def judge(
    snapshot: Snapshot, usage: Usage, ceiling_tokens: int, watch_work_ceiling: bool, stop_at_pauses: bool = True
) -> Verdict | None:
    """The verdict for one snapshot, or None to keep following."""
    if snapshot.status.is_terminal:
        return Verdict.TERMINAL
    if snapshot.status is SessionStatus.QUESTION and stop_at_pauses:
        return Verdict.QUESTION
    if snapshot.status is SessionStatus.AUTHORIZATION and stop_at_pauses:
        return Verdict.AUTHORIZATION
    if watch_work_ceiling and usage.work_tokens >= ceiling_tokens:
        return Verdict.WORK_CEILING
    return None


def result_from(snapshot: Snapshot, verdict: Verdict) -> FollowResult:
    """The verdict with what the workflow needs of the snapshot, bounded (R36): the first actions and
    refusals with their totals, texts cut; the whole snapshot is kept in the result directory. A question's
    choices come only with the QUESTION verdict: with any other status the contract says they are not read."""
    usage = fold_usage(snapshot.steps, snapshot.input_tokens_total)
    return FollowResult(
        verdict=verdict,
        status=snapshot.status,
        usage=usage,
        question=cut(snapshot.question, PAYLOAD_TEXT_MAX),
        choices=snapshot.choices if verdict is Verdict.QUESTION else None,
        authorization=cut(authorization_text(snapshot), PAYLOAD_TEXT_MAX),
        authorization_action=snapshot.authorization.action[: HELPER_BOUNDARY_ITEM_MAX_CHARS + 1]
        if snapshot.authorization is not None
        else None,
        actions=[_cut_action(action) for action in first(snapshot.actions, PAYLOAD_ACTIONS_MAX)],
        actions_total=len(snapshot.actions),
        refusals=[cut(r, PAYLOAD_ITEM_TEXT_MAX) or "" for r in first(snapshot.refusals, PAYLOAD_REFUSALS_MAX)],
        refusals_total=len(snapshot.refusals),
        stop_reason=snapshot.outcome.stop_reason if snapshot.outcome else None,
        error=cut(snapshot.error, PAYLOAD_TEXT_MAX),
    )


def _cut_action(action: Action) -> Action:
    return action.model_copy(
        update={
            "tool": cut(action.tool, PAYLOAD_ITEM_TEXT_MAX),
            "whom": cut(action.whom, PAYLOAD_ITEM_TEXT_MAX),
            "what": cut(action.what, PAYLOAD_ITEM_TEXT_MAX),
        }
    )


# Turns whose outcome text only renders what the runtime renders itself from the snapshot's fields (the question and
# its options, the authorization needed) or says that the runtime cancelled it (its cleanup of a pause, a close).
_RENDERED_BY_THE_RUNTIME = frozenset({SessionStatus.QUESTION, SessionStatus.AUTHORIZATION, SessionStatus.CANCELLED})


def session_message(snapshot: Snapshot) -> str:
    """The core's own words for the owner: the outcome's text of a turn that ended by itself (completed, partial,
    failed, interrupted), else the last completed message. Taking a pause's text as well would repeat the question's
    options, and a cleanup's cancel would read "The turn was cancelled." for a helper waiting for authorization."""
    outcome = snapshot.outcome
    if outcome is not None and outcome.text and outcome.kind not in _RENDERED_BY_THE_RUNTIME:
        return outcome.text
    return snapshot.last_message


def authorization_text(snapshot: Snapshot) -> str | None:
    if snapshot.authorization is None:
        return None
    return " — ".join(p for p in (snapshot.authorization.action, snapshot.authorization.reason) if p)
