"""A failed admission leaves nothing behind (R2, R5): the real coordinator on the dev server, stand-in activities.

A refused admission write must not fail the coordinator's workflow task (every later admission of the owner would
wait behind it): the admission is refused with the write's reason, its row is taken away again, and its place and
slot go to the next helper.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from domain.messages.activities import AdmitHelper, RemovedRows, RemoveRows
from protocol.deadlines import reply_by
from protocol.errors import Unavailable
from protocol.names import ADMIT_HELPER, COUNTS, REMOVE_ROWS, coordinator_id
from protocol.update_senders import admit
from tests.helpers import helper_request, settings_for
from worker import deployment_of, promote
from workflows.coordinator import CoordinatorWorkflow

REFUSED_ID = "clash"
removed: list[str] = []


@activity.defn(name=ADMIT_HELPER)
async def admit_helper(admitted: AdmitHelper) -> None:
    if admitted.start.helper_id == REFUSED_ID:
        raise ApplicationError(
            f"row {admitted.start.owner}/{REFUSED_ID} exists with another admission", non_retryable=True
        )


@activity.defn(name=REMOVE_ROWS)
async def remove_rows(removal: RemoveRows) -> RemovedRows:
    removed.extend(row.helper_id for row in removal.rows)
    return RemovedRows(removed=[row.helper_id for row in removal.rows])


async def test_a_refused_admission_write_frees_its_place_and_says_why(dev_env: WorkflowEnvironment, tmp_path: Path):
    settings = settings_for(tmp_path, "http://127.0.0.1:9", "http://127.0.0.1:9", max_open=1, max_running=1)
    owner = f"o{uuid.uuid4().hex[:6]}"
    removed.clear()
    async with Worker(
        dev_env.client,
        task_queue=settings.task_queue,
        workflows=[CoordinatorWorkflow],
        activities=[admit_helper, remove_rows],
        deployment_config=deployment_of(settings),
    ):
        await promote(dev_env.client, settings)
        with pytest.raises(Unavailable, match="exists with another admission"):
            await admit(dev_env.client, settings, helper_request(owner, REFUSED_ID), reply_by(settings))
        counts = await dev_env.client.get_workflow_handle(coordinator_id(owner)).query(COUNTS, result_type=dict)
        assert counts["open"] == 0 and counts["running"] == 0, counts
        assert removed == [REFUSED_ID], "the row it may have written is taken away again"
        admission = await admit(dev_env.client, settings, helper_request(owner, "next"), reply_by(settings))
        assert admission.status.value == "running", "the only open place and slot went to the next helper"
        await dev_env.client.get_workflow_handle(coordinator_id(owner)).terminate()
