"""The worker's sandbox runner (worker_sandbox.py) against the SDK's own, on a real (time-skipping) server.

The runner compiles the sandbox's calls once and asks the sandboxed instance for serialization contexts
directly. What must stay true: every payload is encoded and decoded under the same contexts as with the SDK's
runner, workflows give the same results, and a non-deterministic call in workflow code still fails its task.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import PayloadCodec, SerializationContext, WithSerializationContext
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

# The sandbox imports this module again for its workflows: everything else passes through.
with workflow.unsafe.imports_passed_through():
    from tests.helpers import eventually
    from worker import WORKFLOW_RUNNER
    from worker_sandbox import SandboxRunner


@activity.defn(name="shout")
async def shout(text: str) -> str:
    return text.upper()


@workflow.defn(name="Shouting")
class Shouting:
    def __init__(self) -> None:
        self.heard: list[str] = []

    @workflow.signal
    def hear(self, text: str) -> None:
        self.heard.append(text)

    @workflow.run
    async def run(self, text: str) -> str:
        first = await workflow.execute_activity(shout, text, start_to_close_timeout=timedelta(seconds=10))
        local = await workflow.execute_local_activity(shout, "local", start_to_close_timeout=timedelta(seconds=10))
        await workflow.wait_condition(lambda: bool(self.heard))
        return f"{first} {local} {self.heard[0]}"


@workflow.defn(name="ReadsTheClock")
class ReadsTheClock:
    @workflow.run
    async def run(self) -> str:
        return datetime.now(UTC).isoformat()  # not deterministic: the sandbox must refuse it


class RecordingCodec(PayloadCodec, WithSerializationContext):
    """Passes payloads through and records the context each batch was encoded or decoded under."""

    def __init__(self, seen: list[str], context: SerializationContext | None = None) -> None:
        self.seen = seen
        self.context = context

    def with_context(self, context: SerializationContext) -> RecordingCodec:
        return RecordingCodec(self.seen, context)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        self.seen.append(f"encode {len(payloads)} {_described(self.context)}")
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        self.seen.append(f"decode {len(payloads)} {_described(self.context)}")
        return list(payloads)


def _described(context: SerializationContext | None) -> str:
    if context is None:
        return "none"
    fields = dataclasses.asdict(context)  # type: ignore[call-overload]
    fields.pop("activity_id", None)
    return f"{type(context).__name__}{sorted(fields.items())}"


async def _run_shouting(env: WorkflowEnvironment, runner: WorkflowRunner, task_queue: str) -> tuple[str, list[str]]:
    seen: list[str] = []
    converter = dataclasses.replace(pydantic_data_converter, payload_codec=RecordingCodec(seen))
    client = Client(env.client.service_client, namespace=env.client.namespace, data_converter=converter)
    async with Worker(client, task_queue=task_queue, workflows=[Shouting], activities=[shout], workflow_runner=runner):
        handle = await client.start_workflow(Shouting.run, "hello", id="shouting", task_queue=task_queue)
        await handle.signal(Shouting.hear, "heard")
        result = await handle.result()
    # The workflow id and task queue are the same in both runs, so the contexts compare as they are.
    return result, sorted(seen)


async def test_payloads_are_encoded_under_the_same_contexts_as_with_the_sdk_runner(time_env: WorkflowEnvironment):
    """Same results, same number of payload batches, each under the same serialization context."""
    task_queue = f"sandbox-{uuid.uuid4().hex[:8]}"
    ours = await _run_shouting(time_env, WORKFLOW_RUNNER, task_queue)
    await _check_completed(time_env, "shouting")
    theirs = await _run_shouting(time_env, SandboxedWorkflowRunner(), task_queue)
    assert ours[0] == "HELLO LOCAL heard"
    assert ours == theirs
    assert any("ActivitySerializationContext" in line for line in ours[1]), ours[1]


async def test_a_non_deterministic_call_still_fails_the_task(time_env: WorkflowEnvironment):
    task_queue = f"sandbox-{uuid.uuid4().hex[:8]}"
    async with Worker(
        time_env.client, task_queue=task_queue, workflows=[ReadsTheClock], workflow_runner=WORKFLOW_RUNNER
    ):
        handle = await time_env.client.start_workflow(
            ReadsTheClock.run, id=f"clock-{task_queue}", task_queue=task_queue
        )

        async def task_failed() -> Any:
            async for event in handle.fetch_history_events():
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                    return event.workflow_task_failed_event_attributes.failure.message
            return None

        message = await eventually(task_failed, timeout=30)
        await handle.terminate()
    assert "datetime" in message or "Cannot access" in message, message


def test_the_worker_uses_the_project_runner() -> None:
    """If a temporalio upgrade moved the sandbox's private parts, the worker falls back to the SDK's runner (and
    logs it); this fails so the upgrade is looked at."""
    assert isinstance(WORKFLOW_RUNNER, SandboxRunner)


async def _check_completed(env: WorkflowEnvironment, workflow_id: str) -> None:
    """The second run reuses the id (so the contexts compare equal): the first one must have completed."""
    description = await env.client.get_workflow_handle(workflow_id).describe()
    assert description.status is not None and description.status.name == "COMPLETED"
