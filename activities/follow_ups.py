"""The core side of follow-ups for the session activities.

- A follow-up's create continues the earlier session when the core offers `continue_from` and that session
  was kept; otherwise (or when the core refuses the continuation) its task carries the earlier outcome.
- A session whose outcome waits for the owner is kept instead of reset when its helper finalizes, on a core
  that can continue it; it is reset once the follow-up has its own session (at once, by the follow-up's
  open), or by the hourly sweep when its row is closed or gone, or after `domain.run.kept_sessions.KEPT_AT_MOST`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from datetime import UTC, datetime
from pathlib import Path

from activities import cleanup
from clients.core_client import CoreClient, CoreError
from contracts.core_api import CreateSession, Grant, SessionLimits, SessionStatus
from domain.book.follow_up import FOLLOWABLE_KINDS
from domain.boundary import action_digest, parse_item
from domain.limits import Limits
from domain.outcome import OutcomeKind
from domain.rows import HelperRow, RowState
from domain.run.cleanup import KEPT, parks
from domain.run.follow_up_task import carried_task
from domain.run.kept_sessions import reset_reason
from store.helper_store import HelperStore
from store.records import KeptSession
from store.results import ResultDirectories

log = logging.getLogger(__name__)

# The statuses of a session a follow-up may continue (docs/contracts.md, "Follow-ups").
KEPT_STATUSES = frozenset(
    {SessionStatus.QUESTION, SessionStatus.AUTHORIZATION, SessionStatus.PARTIAL, SessionStatus.CANCELLED}
)

# Resetting the earlier session must not hold the follow-up's start for long (the open activity has
# HELPER_CHECK_MS + 5 s for everything); the sweep retries a failure.
RELEASE_BOUND_S = 2.0


class FollowUps:
    def __init__(self, store: HelperStore, core: CoreClient, results: ResultDirectories | None) -> None:
        self.store = store
        self.core = core
        self.results = results

    # --- creating a follow-up's session ------------------------------------------------------------------

    async def create_requests(self, row: HelperRow, idempotency_key: str, limits: Limits) -> list[CreateSession]:
        """The creates to try in order: the continuation (when the core can continue the kept earlier
        session), then the create whose task carries the earlier outcome. A retry or a recovery under the
        same key sends the same requests, so the key names one session whichever was made."""
        assert row.follow_up_of is not None
        offered = await self.core.capabilities()
        honours = offered.grants
        earlier = await self.store.get(row.owner, row.follow_up_of)
        carried = create_request(
            row, idempotency_key, limits, task=await self._carried_task(row, earlier), grants_honoured=honours
        )
        kept = await self.store.kept_session_of(row.owner, row.follow_up_of) if earlier is not None else None
        if kept is None or earlier is None or earlier.session_id != kept.session_id:
            return [carried]
        if not offered.continue_from:
            return [carried]
        continued = create_request(row, idempotency_key, limits, continue_from=kept.session_id, grants_honoured=honours)
        return [continued, carried]

    async def release_earlier(self, row: HelperRow) -> None:
        """The follow-up has its own session: the earlier one is no longer needed (reset as cleanup, R20)."""
        if row.follow_up_of is None:
            return
        kept = await self.store.kept_session_of(row.owner, row.follow_up_of)
        if kept is not None:
            await self._reset(kept, "its follow-up has its own session", RELEASE_BOUND_S)

    async def _carried_task(self, row: HelperRow, earlier: HelperRow | None) -> str:
        earlier_text = None
        if earlier is not None and self.results is not None:
            with contextlib.suppress(ValueError):  # a directory outside the results root is never read
                directory = self.results.inside(Path(earlier.result_dir))
                earlier_text = await asyncio.to_thread(self.results.read_text, directory)
        assert row.follow_up_of is not None
        return carried_task(
            language=row.language,
            earlier_id=row.follow_up_of,
            earlier_kind=earlier.outcome_kind if earlier is not None else None,
            earlier_text=earlier_text,
            answer=row.task,
            expired=earlier is not None and earlier.state is RowState.EXPIRED,
        )

    # --- keeping a finalized helper's session -------------------------------------------------------------

    async def keep_instead_of_reset(
        self, owner: str, helper_id: str, session_id: str, outcome_kind: OutcomeKind | None = None
    ) -> bool:
        """Keep (list) the session instead of resetting it, if a follow-up may continue it; True if kept.

        With the outcome's kind known (the helper passes it), an outcome nobody follows up costs no row read."""
        if outcome_kind is not None and outcome_kind not in FOLLOWABLE_KINDS:
            return False
        row = await self.store.get(owner, helper_id)
        if (
            row is None
            or row.session_id != session_id
            or row.outcome_kind not in FOLLOWABLE_KINDS
            or row.state is RowState.CLOSED
            or row.followed_up_by is not None  # its follow-up was admitted before this cleanup ran
        ):
            return False
        try:
            if not (await self.core.capabilities()).continue_from:
                return False
            # A partial outcome written at the hard ceiling may leave the turn running: only a paused or
            # ended session is kept, a running one is reset (stopped) as before (R15, R38).
            if (await self.core.snapshot(session_id)).status not in KEPT_STATUSES:
                return False
        except CoreError:
            return False  # the reset that follows meets the same core and is retried as before
        await self.store.keep_session(owner, helper_id, row.seq, session_id)
        return True

    async def reset_kept_sessions(self, now: datetime | None = None) -> int:
        """The sweep's share: reset every kept session nothing can need any more; returns how many."""
        moment = now or datetime.now(UTC)
        released = 0
        for kept in await self.store.kept_sessions():
            row = await self.store.get(kept.owner, kept.helper_id)
            follow_up = None
            if row is not None and row.followed_up_by is not None:
                follow_up = await self.store.get(kept.owner, row.followed_up_by)
            reason = reset_reason(kept.kept_at, kept.seq, row, follow_up, moment)
            if reason is not None and await self._reset(kept, reason, None, moment):
                released += 1
        return released

    async def _reset(self, kept: KeptSession, reason: str, bound_s: float | None, now: datetime | None = None) -> bool:
        """Reset a kept session, which is then no longer kept; True if it is no longer kept. One whose reset fails
        stays kept for the next sweep, or is parked once the park rule says so (`domain.run.cleanup.KEPT`)."""
        try:
            await cleanup.reset(self.core, kept.session_id, bound_s)
        except CoreError as error:
            if not parks(KEPT, tried_for=(now or datetime.now(UTC)) - kept.kept_at):
                log.warning("reset of kept session %s (%s) failed, retried later: %s", kept.session_id, reason, error)
                return False
            log.warning("reset of kept session %s failed for good, parking it: %s", kept.session_id, error)
            await self.store.record_parked(kept.owner, kept.helper_id, kept.session_id, str(error))
        await self.store.forget_kept(kept.session_id)
        log.info("kept session %s of %s/%s reset: %s", kept.session_id, kept.owner, kept.helper_id, reason)
        return True


def create_request(
    row: HelperRow,
    idempotency_key: str,
    limits: Limits,
    *,
    task: str | None = None,
    continue_from: str | None = None,
    grants_honoured: bool = False,
) -> CreateSession:
    """The create for `row`'s session; a follow-up's may carry another task, or continue an earlier session. A grant's
    follow-up carries the action granted as a grant the core performs once, or, to a core that does not offer
    `grants`, as one more boundary item (R55)."""
    boundary = list(row.boundary)
    grants = []
    if row.granted_action is not None:
        if grants_honoured:
            grants.append(grant_of(row))
        elif row.granted_action.action not in boundary:
            boundary.append(row.granted_action.action)
    return CreateSession(
        idempotency_key=idempotency_key,
        owner=row.owner,
        helper_id=row.helper_id,
        task=row.task if task is None else task,
        boundary=boundary,
        language=row.language,
        model=row.model,
        limits=SessionLimits(max_steps=limits.max_steps, max_input_tokens=limits.max_input_tokens),
        continue_from=continue_from,
        grants=grants,
    )


def grant_of(row: HelperRow) -> Grant:
    """The row's grant as the core takes it: bound to the action's digest, and named by the admission it belongs to,
    so every create of this follow-up (a retry, a recovery, the fallback after a refused continuation) carries the
    one grant the core performs once."""
    assert row.granted_action is not None
    item = parse_item(row.granted_action.action)
    digest = action_digest(item)
    grant_id = hashlib.sha256("\n".join((row.owner, row.helper_id, str(row.seq), digest)).encode()).hexdigest()
    return Grant(id=grant_id, action=str(item), digest=digest)
