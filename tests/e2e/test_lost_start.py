"""An admitted helper whose workflow is missing when its slot comes (R4, R19): started from its row, not lost.

The chaos soak once left a row `waiting` for good with no workflow in Temporal: the coordinator's slot signal
found none, and the slot passed on. These tests take a waiting helper's workflow away on the dev server
(deleted, as if its start had been lost; terminated, as an operator would) and free a slot.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from temporalio import activity
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.session import SessionActivities
from clients.chat_client import ChatClient
from clients.core_client import CoreClient
from domain.messages.activities import FollowedUp
from domain.messages.updates import Admission
from domain.outcome import OutcomeKind
from domain.rows import HelperRow, RowState
from protocol.errors import Accepted
from protocol.names import helper_workflow_id
from reference.chat.server import running_chat
from reference.core.script import scripted_task
from reference.core.server import running_core
from starter.client import HelperClient
from store.helper_store import HelperStore
from store.results import ResultDirectories
from tests.e2e.conftest import E2E_FOLLOW, Stack, _stack
from tests.helpers import delete_workflow, eventually, helper_request, settings_for
from worker import WORKFLOW_RUNNER, WORKFLOWS, activities_of, deployment_of, follows_worker, promote

pytestmark = pytest.mark.e2e


@pytest.fixture
async def four_open(dev_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Stack]:
    """Four open helpers per owner, so a fourth waits for one of three slots."""
    async with (
        running_core(tmp_path / "core.sqlite3") as core_url,
        running_chat() as chat_url,
        _stack(dev_env, tmp_path, core_url, chat_url, max_open=4) as built,
    ):
        yield built


async def _fill_slots_and_queue(stack: Stack) -> None:
    for n in range(3):
        await stack.client.start(helper_request(stack.owner, f"busy-{n}", scripted_task("Busy.", hold_until="go")))
    admission = await stack.client.start(
        helper_request(stack.owner, "queued", scripted_task("Queued work.", steps=1, step_ms=20, final_text="Done."))
    )
    assert admission.status is RowState.WAITING


async def _outcome(stack: Stack, helper_id: str) -> HelperRow | None:
    row = await stack.store.get(stack.owner, helper_id)
    return row if row is not None and row.outcome_kind is not None else None


async def _free_a_slot(stack: Stack) -> None:
    answer = await stack.client.close(stack.owner, "busy-0")
    assert answer.state is RowState.CLOSED


async def test_a_waiting_helper_whose_workflow_is_missing_is_started_from_its_row(four_open: Stack) -> None:
    stack = four_open
    await _fill_slots_and_queue(stack)
    workflow_id = helper_workflow_id(stack.owner, "queued")
    run_id = await delete_workflow(stack.env.client, workflow_id)

    await _free_a_slot(stack)

    row: HelperRow = await eventually(functools.partial(_outcome, stack, "queued"), timeout=30)
    assert row.outcome_kind is OutcomeKind.COMPLETED, row
    assert "Done." in (row.summary or "")
    description = await stack.env.client.get_workflow_handle(workflow_id).describe()
    assert description.run_id != run_id  # a new run, started from the row
    assert (await description.memo())["seq"] == row.seq


async def test_a_terminated_waiting_helper_gives_its_slot_on(four_open: Stack) -> None:
    stack = four_open
    await _fill_slots_and_queue(stack)
    workflow_id = helper_workflow_id(stack.owner, "queued")
    await stack.env.client.get_workflow_handle(workflow_id).terminate("an operator removed it")

    await _free_a_slot(stack)

    # Its place is free again: a new helper is admitted and runs (three slots: busy-1, busy-2 and it).
    async def runs() -> bool:
        admission = await stack.client.start(
            helper_request(stack.owner, "next", scripted_task("Next.", steps=1, step_ms=20))
        )
        return admission.status is RowState.RUNNING or admission.status is RowState.UNREPORTED

    assert await eventually(runs, timeout=20)
    description = await stack.env.client.get_workflow_handle(workflow_id).describe()
    assert description.status is WorkflowExecutionStatus.TERMINATED  # not started again
    row = await stack.store.get(stack.owner, "queued")
    assert row is not None and row.state is RowState.CLOSED  # not "waiting" for ever


class _SlowAdmission:
    """The store, with one helper's admission slow after its row is written: the first two attempts of the
    local activity outlast its 10 s bound and are cut, the third goes on (20 s in all, within the admission's
    30 s)."""

    def __init__(self, store: HelperStore, helper_id: str) -> None:
        self._store = store
        self.helper_id = helper_id
        self.row_written = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def insert_admitted(self, row: HelperRow, followed_up: FollowedUp | None = None) -> bool:
        written = await self._store.insert_admitted(row, followed_up)
        if row.helper_id == self.helper_id and activity.info().attempt <= 2:
            self.row_written.set()
            await asyncio.sleep(60)  # cut at the local activity's 10 s
        return written


async def test_a_close_during_a_slow_admission_passes_its_slot_to_the_admitted_helper(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """R4, R6, R8: a store that stalls an admission for 20 s after writing its row (the helper's workflow not yet
    started), while the owner closes a running helper: the close waits for the admission (the SDK runs no other
    handler while a local activity is under way), then its slot goes to the admitted helper, which completes.
    Nothing is lost or granted to a workflow that does not exist yet. The starter waits as long as the stall (its
    bound raised to 40 s), so the close is answered once the admission is."""
    async with running_core(tmp_path / "core.sqlite3") as core_url, running_chat() as chat_url:
        settings = settings_for(tmp_path, core_url, chat_url, max_open=4, follow=E2E_FOLLOW)
        settings = settings.model_copy(update={"starter_timeout_ms": 40_000})
        store = await HelperStore.connect(settings.store, run_migrations=True)
        slow = _SlowAdmission(store, "queued")
        core = CoreClient.of_worker(settings)
        chat = ChatClient.of_worker(settings)
        worker = Worker(
            dev_env.client,
            task_queue=settings.task_queue,
            workflows=WORKFLOWS,
            workflow_runner=WORKFLOW_RUNNER,
            activities=activities_of(
                cast(HelperStore, slow), ResultDirectories(settings.results_dir), core, chat, settings
            ),  # type: ignore[arg-type]
            deployment_config=deployment_of(settings),
        )
        follows = follows_worker(
            dev_env.client, settings, SessionActivities(store, core, ResultDirectories(settings.results_dir))
        )
        try:
            async with worker, follows:
                await promote(dev_env.client, settings)
                client = HelperClient(settings, store.reads, dev_env.client)
                owner = f"owner-{uuid.uuid4().hex[:8]}"
                hold = scripted_task("Busy.", hold_until=f"{owner}-go")
                for n in range(3):
                    await client.start(helper_request(owner, f"busy-{n}", hold))
                queued = scripted_task("Queued work.", steps=1, step_ms=20, final_text="Done.")
                admission = asyncio.create_task(client.start(helper_request(owner, "queued", queued)))
                await asyncio.wait_for(slow.row_written.wait(), timeout=20)
                await asyncio.sleep(9)  # well inside the stall
                closed = await client.close(owner, "busy-0")
                assert closed.state is RowState.CLOSED
                assert (await admission).owner == owner

                async def outcome() -> HelperRow | None:
                    row = await store.get(owner, "queued")
                    return row if row is not None and row.outcome_kind is not None else None

                row: HelperRow = await eventually(outcome, timeout=40)
                assert row.outcome_kind is OutcomeKind.COMPLETED, row
                async with httpx.AsyncClient() as http:
                    await http.post(f"{core_url}/v1/demo/latches/{owner}-go/release")
        finally:
            await core.aclose()
            await chat.aclose()
            await store.close()


async def test_a_slow_admission_is_answered_accepted_within_the_bound(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """R4, R48: a store that stalls an admission for 20 s after writing its row: the starter answers within its
    10 s bound that the admission was accepted (not that nothing was taken), and the helper is then admitted and
    runs; asking again answers with that same helper, and nothing starts twice."""
    async with running_core(tmp_path / "core.sqlite3") as core_url, running_chat() as chat_url:
        settings = settings_for(tmp_path, core_url, chat_url, follow=E2E_FOLLOW)
        assert settings.starter_timeout_ms == 10_000
        store = await HelperStore.connect(settings.store, run_migrations=True)
        slow = _SlowAdmission(store, "slow")
        core = CoreClient.of_worker(settings)
        chat = ChatClient.of_worker(settings)
        results = ResultDirectories(settings.results_dir)
        worker = Worker(
            dev_env.client,
            task_queue=settings.task_queue,
            workflows=WORKFLOWS,
            workflow_runner=WORKFLOW_RUNNER,
            activities=activities_of(cast(HelperStore, slow), results, core, chat, settings),  # type: ignore[arg-type]
            deployment_config=deployment_of(settings),
        )
        follows = follows_worker(dev_env.client, settings, SessionActivities(store, core, results))
        try:
            async with worker, follows:
                await promote(dev_env.client, settings)
                client = HelperClient(settings, store.reads, dev_env.client)
                owner = f"owner-{uuid.uuid4().hex[:8]}"
                task = scripted_task("Slow to admit.", steps=1, step_ms=20, final_text="Done.")
                started = time.monotonic()
                with pytest.raises(Accepted) as accepted:
                    await client.start(helper_request(owner, "slow", task))
                assert time.monotonic() - started < 12, "answered within the bound"
                assert "accepted" in accepted.value.message and accepted.value.exit_code == 4

                async def admitted() -> Admission | None:
                    again = await client.start(helper_request(owner, "slow", task))
                    return again if again.existing else None

                again: Admission = await eventually(admitted, timeout=40)
                assert again.helper_id == "slow"
                row: HelperRow = await eventually(functools.partial(_final_row, store, owner, "slow"), timeout=40)
                assert row.outcome_kind is OutcomeKind.COMPLETED, row
                runs = [
                    run
                    async for run in dev_env.client.list_workflows(
                        f"WorkflowId = '{helper_workflow_id(owner, 'slow')}'"
                    )
                ]
                assert len(runs) == 1, "the helper started once"
        finally:
            await core.aclose()
            await chat.aclose()
            await store.close()


async def _final_row(store: HelperStore, owner: str, helper_id: str) -> HelperRow | None:
    row = await store.get(owner, helper_id)
    return row if row is not None and row.outcome_kind is not None else None
