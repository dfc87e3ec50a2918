"""How a helper follows its session: the follow activity, or the open's first look when it already saw the
session end or pause (R11, R44). A mixin of `HelperWorkflow`, kept apart so each file says one thing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.session import SessionActivities
    from domain.activity_io import HelperStart, OpenedSession
    from domain.ending import Step
    from domain.follow import FollowCursor, FollowRequest, FollowResult
    from workflows import options


class HelperFollowing:
    """The following half of `HelperWorkflow`; the attributes are the workflow's."""

    start: HelperStart
    session_id: str | None
    generation: int
    _first_look: OpenedSession | None
    # Provided by `HelperWorkflow`; declared here so the mixin type-checks without stubs.
    _track: Callable[[asyncio.Task[FollowResult]], asyncio.Task[FollowResult]]

    def _follow_or_look(self, step: Step) -> asyncio.Future[FollowResult]:
        """The follow, or the first look's verdict when the open already saw the session end or pause, judged as
        this follow would judge it (the first follow after the open watches the ceiling and stops at pauses)."""
        look, self._first_look = self._first_look, None
        cursor = look.cursor if look is not None else None
        if look is not None and look.looked is not None and step.watch_work_ceiling and step.stop_at_pauses:
            looked: asyncio.Future[FollowResult] = asyncio.get_running_loop().create_future()
            looked.set_result(look.looked)
            return looked
        return self._start_follow(step.watch_work_ceiling, step.stop_at_pauses, cursor)

    def _start_follow(
        self, watch_work_ceiling: bool, stop_at_pauses: bool, cursor: FollowCursor | None = None
    ) -> asyncio.Task[FollowResult]:
        assert self.session_id is not None
        start = self.start
        return self._track(
            workflow.start_activity_method(
                SessionActivities.follow_session,
                FollowRequest(
                    owner=start.owner,
                    helper_id=start.helper_id,
                    seq=start.seq,
                    session_id=self.session_id,
                    generation=self.generation,
                    ceiling_tokens=start.limits.ceiling_tokens,
                    watch_work_ceiling=watch_work_ceiling,
                    stop_at_pauses=stop_at_pauses,
                    tuning=start.follow,
                    check_ms=start.check_ms,
                    cursor=cursor,
                ),
                summary=f"follow session {self.session_id}: live steps and work tokens in the heartbeat details",
                **options.follow(start.check_ms, start.follow, cancellable=True),
            )
        )
