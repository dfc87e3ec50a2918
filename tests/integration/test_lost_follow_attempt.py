"""R46, R57: a follow attempt the server handed to a replica that never began it (its poll was answered as it died)
left no trace in the row, and the follow sends no heartbeat the server could miss. When the replica is taken for
dead, the survivor finds that attempt all the same, through the server, and the follow runs again at once instead
of at its start-to-close timeout. On the dev server, with a poll made by hand as the dead replica's."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import PollActivityTaskQueueRequest, PollActivityTaskQueueResponse
from temporalio.client import Client, WorkflowHandle
from temporalio.common import RetryPolicy
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from protocol.names import FOLLOW_SESSION, helper_workflow_id
from replica.liveness import RESTARTS_AT_ONCE, restart_follows_of
from store.helper_store import HelperStore
from tests.helpers import eventually
from tests.store.test_helper_store import running

DEAD_REPLICA = "4242@gone-node"
# Far beyond the test's wait: an attempt left to this timeout would fail the test.
START_TO_CLOSE = timedelta(minutes=10)
FOLLOWED_AGAIN_WITHIN_S = 20.0
# The probe imports nothing the sandbox would have to vet.
UNSANDBOXED = UnsandboxedWorkflowRunner()


@activity.defn(name=FOLLOW_SESSION)
async def follow_session() -> str:
    return f"attempt {activity.info().attempt} on {activity.client().identity}"


@workflow.defn(name="lost-follow-probe")
class FollowProbe:
    """A helper's follow as the server sees it: an activity named like the follow, with no heartbeat timeout."""

    @workflow.run
    async def run(self, follows_queue: str) -> str:
        return await workflow.execute_activity(
            follow_session,
            task_queue=follows_queue,
            start_to_close_timeout=START_TO_CLOSE,
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200)),
        )


async def _taken_by_the_dead_replica(client: Client, follows_queue: str) -> PollActivityTaskQueueResponse:
    request = PollActivityTaskQueueRequest(
        namespace=client.namespace, task_queue=TaskQueue(name=follows_queue), identity=DEAD_REPLICA
    )
    while True:  # a long poll that ends empty is asked again
        taken = await client.workflow_service.poll_activity_task_queue(request, timeout=timedelta(seconds=70))
        if taken.task_token:
            return taken


@contextlib.asynccontextmanager
async def _running_helper(client: Client, tmp_path: Path) -> AsyncIterator[tuple[HelperStore, str, str]]:
    """A store whose row runs a helper no follow attempt has named its replica for, and a worker for its probe
    workflow; yields the store, the helper's workflow id (one per test, on a shared dev server) and its queue."""
    store = await HelperStore.connect(f"sqlite+aiosqlite:///{tmp_path / 'helpers.sqlite3'}", run_migrations=True)
    try:
        helper_id = f"h-{uuid.uuid4().hex[:8]}"
        await running(store, helper_id)
        queue = f"lost-{uuid.uuid4().hex[:8]}"
        async with Worker(client, task_queue=queue, workflows=[FollowProbe], workflow_runner=UNSANDBOXED):
            yield store, helper_workflow_id("anna", helper_id), queue
    finally:
        await store.close()


async def test_an_attempt_the_dead_replica_never_began_is_started_again_once_it_is_taken_for_dead(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    client = dev_env.client
    async with _running_helper(client, tmp_path) as (store, workflow_id, queue):
        follows_queue = f"{queue}-follows"
        taken = asyncio.create_task(_taken_by_the_dead_replica(client, follows_queue))
        handle = await client.start_workflow(FollowProbe.run, follows_queue, id=workflow_id, task_queue=queue)
        lost = await asyncio.wait_for(taken, FOLLOWED_AGAIN_WITHIN_S)
        assert lost.attempt == 1
        async with Worker(client, task_queue=follows_queue, activities=[follow_session]):
            # The survivor has just claimed the dead replica's record.
            await restart_follows_of(client, store, DEAD_REPLICA, asyncio.Semaphore(RESTARTS_AT_ONCE))
            result = await asyncio.wait_for(handle.result(), FOLLOWED_AGAIN_WITHIN_S)
    assert result == f"attempt 2 on {client.identity}"


async def _scheduled(handle: WorkflowHandle[Any, str]) -> bool:
    return bool((await handle.describe()).raw_description.pending_activities)


async def test_a_follow_waiting_for_a_slot_is_left_alone(dev_env: WorkflowEnvironment, tmp_path: Path) -> None:
    """A running helper whose follow no replica took yet is not touched when some replica dies: it is not the dead
    replica's, and its first attempt goes on waiting for a slot."""
    client = dev_env.client
    async with _running_helper(client, tmp_path) as (store, workflow_id, queue):
        follows_queue = f"{queue}-follows"
        handle = await client.start_workflow(FollowProbe.run, follows_queue, id=workflow_id, task_queue=queue)
        await eventually(lambda: _scheduled(handle), timeout=FOLLOWED_AGAIN_WITHIN_S, interval=0.1)
        restarting = restart_follows_of(client, store, DEAD_REPLICA, asyncio.Semaphore(RESTARTS_AT_ONCE))
        await asyncio.wait_for(restarting, 5.0)
        async with Worker(client, task_queue=follows_queue, activities=[follow_session]):
            result = await asyncio.wait_for(handle.result(), FOLLOWED_AGAIN_WITHIN_S)
    assert result == f"attempt 1 on {client.identity}"
