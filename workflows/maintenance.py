"""Maintenance on a Temporal Schedule: sweep result directories that no row points at (R29), and reset the
sessions kept for follow-ups that nothing can need any more.

A failed directory removal is logged and left; this sweep, hourly, removes what is left. The worker makes
sure the Schedule exists when it starts (`ensure_sweep_schedule`).
"""

from __future__ import annotations

import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.common import VersioningBehavior

with workflow.unsafe.imports_passed_through():
    from activities.rows import RowActivities
    from activities.session import SessionActivities
    from workflows import options

SWEEP_EVERY = timedelta(hours=1)
# A directory younger than this may belong to a row that is being written right now.
SWEEP_OLDER_THAN = timedelta(hours=1)


@workflow.defn(versioning_behavior=VersioningBehavior.PINNED)
class SweepWorkflow:
    @workflow.run
    async def run(self) -> int:
        swept: int = await workflow.execute_activity_method(
            RowActivities.sweep_orphan_directories,
            int(SWEEP_OLDER_THAN.total_seconds()),
            summary="remove result directories no row points at",
            **options.SWEEP,
        )
        await workflow.execute_activity_method(
            RowActivities.forget_wait_records,
            summary="remove the records of waits that ended longer ago than their keep",
            **options.SWEEP,
        )
        await workflow.execute_activity_method(
            SessionActivities.reset_kept_sessions,
            summary="reset sessions kept for follow-ups that nothing can need any more",
            **options.SWEEP,
        )
        return swept


async def ensure_sweep_schedule(client: Client, task_queue: str) -> None:
    schedule_id = f"helpers/maintenance/{task_queue}/sweep-orphans"
    # Another replica, or an earlier start, may have made it already.
    with contextlib.suppress(ScheduleAlreadyRunningError):
        await client.create_schedule(
            schedule_id,
            Schedule(
                action=ScheduleActionStartWorkflow(SweepWorkflow.run, id=f"{schedule_id}/run", task_queue=task_queue),
                spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=SWEEP_EVERY)]),
                policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
                state=ScheduleState(note="sweeps orphan result directories (R29)"),
            ),
        )
