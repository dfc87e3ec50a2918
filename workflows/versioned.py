"""The workflows as a versioned worker registers them (Worker Versioning; docs/operations.md, "Rollout and rollback").

A helper stays PINNED to the build it started on: it never meets new code mid-run, so a rollout needs no patch for
it. The coordinator runs for ever (continue-as-new), so it is AUTO_UPGRADE: it moves to the current build at its
next workflow task, and a change to its code still needs `workflow.patched` and the replay tests. The Goal check
and the sweep last minutes: PINNED.

The workflow classes themselves declare no behaviour: the server refuses one from a worker that is not versioned
("versioning behavior cannot be specified without deployment options being set with versioned mode"), and an
unversioned worker (the default, the local stack, the tests) registers those classes as they are. These subclasses
add only the behaviour: same workflow names, and each run only awaits its parent's, so they are replay-identical.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import VersioningBehavior

from workflows.coordinator import CoordinatorWorkflow
from workflows.goal_check import GoalCheckWorkflow
from workflows.helper import HelperWorkflow
from workflows.maintenance import SweepWorkflow

with workflow.unsafe.imports_passed_through():
    from activities.goals import GoalCheckResult
    from domain.activity_io import HelperStart
    from domain.goals import Goal
    from protocol.messages import CoordinatorStart, HelperResult

_AUTO = VersioningBehavior.AUTO_UPGRADE
_PINNED = VersioningBehavior.PINNED


@workflow.defn(name=workflow._Definition.must_from_class(CoordinatorWorkflow).name, versioning_behavior=_AUTO)
class VersionedCoordinatorWorkflow(CoordinatorWorkflow):
    @workflow.run
    async def run(self, start: CoordinatorStart) -> None:
        await super().run(start)


@workflow.defn(name=workflow._Definition.must_from_class(HelperWorkflow).name, versioning_behavior=_PINNED)
class VersionedHelperWorkflow(HelperWorkflow):
    @workflow.run
    async def run(self, start: HelperStart) -> HelperResult | str:
        return await super().run(start)


@workflow.defn(name=workflow._Definition.must_from_class(GoalCheckWorkflow).name, versioning_behavior=_PINNED)
class VersionedGoalCheckWorkflow(GoalCheckWorkflow):
    @workflow.run
    async def run(self, goal: Goal) -> GoalCheckResult:
        return await super().run(goal)


@workflow.defn(name=workflow._Definition.must_from_class(SweepWorkflow).name, versioning_behavior=_PINNED)
class VersionedSweepWorkflow(SweepWorkflow):
    @workflow.run
    async def run(self) -> int:
        return await super().run()


VERSIONED_WORKFLOWS: list[type] = [
    VersionedCoordinatorWorkflow,
    VersionedHelperWorkflow,
    VersionedGoalCheckWorkflow,
    VersionedSweepWorkflow,
]
