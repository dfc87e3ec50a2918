"""One Goal check, started by the Goal's Temporal Schedule (R30): admit a helper carrying the Goal id.

The check's helper id comes from the moment the Schedule started it, so a retried start admits the same
helper once. Whether it was admitted or refused (it must leave a place for the owner's own helpers) is
this workflow's result, visible in the Web UI next to the Schedule.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import RawValue, VersioningBehavior
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.goals import GoalActivities
    from domain.goals import Goal, check_helper_id
    from domain.messages.activities import GoalCheck, GoalCheckResult
    from protocol.names import GOAL_CHECK_WORKFLOW
    from workflows import options
    from workflows.start_input import read_start


@workflow.defn(name=GOAL_CHECK_WORKFLOW, versioning_behavior=VersioningBehavior.PINNED)
class GoalCheckWorkflow:
    @workflow.run
    async def run(self, start: RawValue) -> GoalCheckResult:
        goal = read_start(start, Goal)
        if isinstance(goal, ApplicationError):
            raise goal  # the Goal was added by a client with other codec keys: each check says so in the Web UI
        helper_id = check_helper_id(goal.goal_id, workflow.info().start_time)
        return await workflow.execute_activity_method(
            GoalActivities.start_goal_check,
            GoalCheck(goal=goal, helper_id=helper_id),
            summary=f"admit Goal check {helper_id}",
            **options.GOAL_CHECK_ADMISSION,
        )
