"""How a helper starts running: the open of its core session and its deadline timers (R9, R15, R25, R38). A
mixin of `HelperWorkflow`, kept apart so each file says one thing."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.session import SessionActivities
    from domain.activity_io import FIRST_LOOK_MAX_MS, FirstLook, HelperStart, OpenedSession, OpenSession
    from workflows import options
    from workflows.failures import CALL_FAILED, cause_of, failed_for_good

# The session is opened by a local activity in the task that starts running (histories recorded before open it
# with an activity, one task more).
OPEN_IN_TASK_PATCH = "helper-open-in-task"
# The open takes a first look at its session; a session already ended needs no follow activity (histories recorded
# before always start one).
FIRST_LOOK_PATCH = "helper-first-look"
DEADLINE_SUMMARY = "deadline: ask for a partial outcome"
HARD_CEILING_SUMMARY = "hard ceiling: deadline + grace"


class HelperOpening:
    """The opening half of `HelperWorkflow`; the attributes are the workflow's."""

    start: HelperStart

    def _timer(self, at: datetime, summary: str) -> asyncio.Future[None]:
        """A durable timer to `at`: it fires after worker and server restarts too (R15, R25); a moment already
        passed fires at once."""
        return asyncio.ensure_future(
            workflow.sleep(max(at - workflow.now(), timedelta(milliseconds=1)), summary=summary)
        )

    def _first_look_of(self, start: HelperStart) -> FirstLook:
        """What the open looks for: the first follow's verdicts, waiting at most a second for a change (a long
        poll, where the core offers it) so that a quick session ends in this task."""
        return FirstLook(
            ceiling_tokens=start.limits.ceiling_tokens,
            tuning=start.follow,
            wait_ms=min(start.follow.wait_ms, FIRST_LOOK_MAX_MS),
        )

    async def _open_in_task(self, opening: OpenSession) -> asyncio.Future[OpenedSession]:
        """The open's first attempt, as a local activity in this task: no workflow task and no activity task of
        its own for the usual quick create. It is bounded (`options.first_open`); a create that fails or
        outlasts it goes on as an activity, retried until the hard ceiling, under the same key (a second create
        returns the same session). Returns the open, answered or under way."""
        answered: asyncio.Future[OpenedSession] = asyncio.get_running_loop().create_future()
        try:
            answered.set_result(
                await workflow.execute_local_activity_method(
                    SessionActivities.open_session,
                    opening,
                    **options.first_open(self.start.check_ms, opening.first_look),
                )
            )
        except CALL_FAILED as error:
            if not failed_for_good(error):
                workflow.logger.info(
                    "first open of %s failed, going on as an activity: %s", self.start.helper_id, cause_of(error)
                )
                return self._open_activity(opening)
            answered.set_exception(error)
        return answered

    def _open_activity(self, opening: OpenSession) -> asyncio.Task[OpenedSession]:
        return workflow.start_activity_method(
            SessionActivities.open_session,
            opening,
            summary="create the core session (idempotent key)",
            **options.core_call(self.start.check_ms, cancellable=True, looking=opening.first_look),
        )
