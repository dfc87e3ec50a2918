"""R45, Worker Versioning on the dev server (docs/operations.md, "Releases"): a helper started on build A stays on A
after build B becomes current, and ends there; a helper admitted afterwards runs on B; the coordinator continues as
new onto B and stays pinned there; after a rollback to A the next helper runs on A and the coordinator follows."""

from __future__ import annotations

import contextlib
import functools
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType, VersioningBehavior
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from config.settings import Settings
from contracts.core_api import SessionStatus
from protocol.names import coordinator_id, helper_workflow_id
from reference.chat.server import running_chat
from starter.client import HelperClient
from store.helper_store import HelperStore
from tests.e2e.conftest import E2E_FOLLOW
from tests.fakes.fake_core import FakeCore, FakeSession, serving_fake_core
from tests.helpers import eventually, helper_request, settings_for
from worker import promote, running_worker

pytestmark = pytest.mark.e2e


async def _set_current(client: Client, deployment: str, build_id: str) -> None:
    """`temporal worker deployment set-current-version`, as the worker promotes its own build (bounded)."""
    await promote(client, Settings(deployment_name=deployment, build_id=build_id))


async def _version_of(client: Client, workflow_id: str) -> tuple[str, int]:
    """The build a workflow is on and its versioning behaviour, as the server records them."""
    info = (await client.get_workflow_handle(workflow_id).describe()).raw_description.workflow_execution_info
    return info.versioning_info.deployment_version.build_id, info.versioning_info.behavior


async def _recorded_version_of(client: Client, workflow_id: str) -> tuple[str, int]:
    """`_version_of` once the server has recorded one: it does at the first completed workflow task, and a helper
    opens its session inside that task (a local activity), so the session can exist a moment before."""

    async def recorded() -> tuple[str, int] | None:
        version = await _version_of(client, workflow_id)
        return version if version[0] else None

    found: tuple[str, int] = await eventually(recorded, timeout=20)
    return found


async def _run_id(client: Client, workflow_id: str) -> str:
    run_id = (await client.get_workflow_handle(workflow_id).describe()).run_id
    assert run_id is not None
    return run_id


async def _task_builds(client: Client, workflow_id: str) -> set[str]:
    """The builds that completed the workflow's tasks."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return {
        event.workflow_task_completed_event_attributes.deployment_version.build_id
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    }


async def _finished(store: HelperStore, owner: str, helper_id: str) -> bool:
    row = await store.get(owner, helper_id)
    return row is not None and row.outcome_kind is not None


@contextlib.asynccontextmanager
async def _worker(client: Client, settings: Settings, build_id: str) -> AsyncIterator[None]:
    # The test promotes each build itself, as an operator does.
    async with running_worker(client, settings.model_copy(update={"build_id": build_id, "promote_build": False})):
        yield


async def test_a_running_helper_stays_on_its_build_and_a_new_one_runs_on_the_current(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    client = dev_env.client
    core = FakeCore()
    owner, deployment = f"owner-{uuid.uuid4().hex[:8]}", f"helper-runtime-{uuid.uuid4().hex[:8]}"
    async with serving_fake_core(core) as core_url, running_chat() as chat_url:
        settings = settings_for(tmp_path, core_url, chat_url, follow=E2E_FOLLOW, check_ms=2_000)
        settings = settings.model_copy(update={"deployment_name": deployment})
        store = await HelperStore.connect(settings.store, run_migrations=True)
        starter = HelperClient(settings, store.reads, client)
        try:
            async with _worker(client, settings, "a"):
                await _set_current(client, deployment, "a")
                await starter.start(helper_request(owner, "on-a"))
                first: FakeSession = await eventually(lambda: core.session_of("on-a"))
                assert await _recorded_version_of(client, helper_workflow_id(owner, "on-a")) == (
                    "a",
                    VersioningBehavior.VERSIONING_BEHAVIOR_PINNED,
                )

                # The rollout: build B polls and becomes current while the first helper runs.
                async with _worker(client, settings, "b"):
                    await _set_current(client, deployment, "b")
                    await starter.start(helper_request(owner, "on-b"))
                    second: FakeSession = await eventually(lambda: core.session_of("on-b"))
                    assert await _recorded_version_of(client, helper_workflow_id(owner, "on-b")) == (
                        "b",
                        VersioningBehavior.VERSIONING_BEHAVIOR_PINNED,
                    )
                    first.add_step(1_000, 100)
                    first.end(SessionStatus.COMPLETED, "finished on A")
                    second.end(SessionStatus.COMPLETED, "finished on B")
                    for helper_id in ("on-a", "on-b"):
                        await eventually(functools.partial(_finished, store, owner, helper_id), timeout=30)

                    # The pinned helper ran every one of its tasks on A, before and after B became current.
                    assert await _task_builds(client, helper_workflow_id(owner, "on-a")) == {"a"}
                    assert await _task_builds(client, helper_workflow_id(owner, "on-b")) == {"b"}

                    # The coordinator is PINNED too: at its next workflow task after B became current (here the
                    # helpers' finished signals) it continues as new, and the new run starts on B and stays there.
                    first_run = await _run_id(client, coordinator_id(owner))

                    async def on_b() -> bool:
                        return await _version_of(client, coordinator_id(owner)) == (
                            "b",
                            VersioningBehavior.VERSIONING_BEHAVIOR_PINNED,
                        )

                    await eventually(on_b, timeout=20, interval=0.2)
                    assert await _run_id(client, coordinator_id(owner)) != first_run
                    assert await _task_builds(client, coordinator_id(owner)) == {"b"}
                    row = await store.get(owner, "on-a")
                    assert row is not None and row.outcome_kind is not None and row.outcome_kind.value == "completed"

                    # The rollback: A is current again (its workers never stopped); the next helper runs on A.
                    await _set_current(client, deployment, "a")
                    await starter.start(helper_request(owner, "back-on-a"))
                    third: FakeSession = await eventually(lambda: core.session_of("back-on-a"))
                    assert await _recorded_version_of(client, helper_workflow_id(owner, "back-on-a")) == (
                        "a",
                        VersioningBehavior.VERSIONING_BEHAVIOR_PINNED,
                    )
                    third.end(SessionStatus.COMPLETED, "finished on A again")
                    await eventually(functools.partial(_finished, store, owner, "back-on-a"), timeout=30)

                    async def back_on_a() -> bool:
                        return (await _version_of(client, coordinator_id(owner)))[0] == "a"

                    await eventually(back_on_a, timeout=20, interval=0.2)
        finally:
            await store.close()
