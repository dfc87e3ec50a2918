"""How a failed local activity reaches workflow code (temporalio 1.35), which `workflows.failures` relies on.

An activity's failure arrives as an ActivityError around its cause; a local activity's own failure arrives as
the bare ApplicationError it raised, and only its timeout as an ActivityError. A helper that caught only
ActivityError around its local reset failed after its outcome when the core refused the reset. If an SDK
upgrade changes this, these tests say so.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from workflows.failures import CALL_FAILED, cause_of, failed_for_good


@activity.defn(name="answer")
async def answer(mode: str) -> str:
    if mode == "refuse":
        raise ApplicationError("refused for good", type="Refused", non_retryable=True)
    if mode == "down":
        raise ApplicationError("down", type="Down")
    await asyncio.sleep(5)
    return "late"


@workflow.defn(name="CallsLocally")
class CallsLocally:
    @workflow.run
    async def run(self, mode: str) -> str:
        try:
            await workflow.execute_local_activity(
                answer,
                mode,
                start_to_close_timeout=timedelta(seconds=1),
                retry_policy=RetryPolicy(maximum_attempts=1),
            )
        except CALL_FAILED as error:
            return f"{type(error).__name__} for_good={failed_for_good(error)} {cause_of(error)}"
        return "answered"


async def _run(env: WorkflowEnvironment, mode: str) -> str:
    task_queue = f"local-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=task_queue, workflows=[CallsLocally], activities=[answer]):
        return await env.client.execute_workflow(
            CallsLocally.run, mode, id=f"local-{task_queue}", task_queue=task_queue
        )


async def test_a_local_activity_refusal_arrives_unwrapped_and_is_caught(time_env: WorkflowEnvironment) -> None:
    assert await _run(time_env, "refuse") == "ApplicationError for_good=True refused for good"


async def test_a_local_activity_failure_that_could_be_retried_arrives_unwrapped(time_env: WorkflowEnvironment) -> None:
    assert await _run(time_env, "down") == "ApplicationError for_good=False down"


async def test_a_local_activity_timeout_arrives_as_an_activity_error(time_env: WorkflowEnvironment) -> None:
    assert (await _run(time_env, "slow")).startswith("ActivityError for_good=False")
