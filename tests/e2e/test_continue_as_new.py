"""The coordinator's history stays bounded: it continues as new, carrying its book, long before the server's
2,000-updates-per-run cap or the history limits, and admissions keep working across every run."""

from __future__ import annotations

import asyncio
import time

import pytest

from domain.rows import RowState
from protocol.names import COUNTS, coordinator_id
from tests.e2e.conftest import Stack
from tests.fakes.fake_core import FakeCore
from tests.helpers import eventually, helper_request, rows_of
from workflows import coordinator

pytestmark = pytest.mark.e2e

LANES = 10
PER_LANE = 250  # 2,500 admissions in all


async def test_a_coordinator_carries_its_book_across_runs(
    fake_stack: tuple[Stack, FakeCore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """R6, R45: with the per-run message cap lowered to 10, admissions that are then closed while waiting span
    several runs of one owner's coordinator; each run starts from the book the last one carried: the running
    helpers keep their slots, the next admission waits behind them, and no waiting helper reached the core."""
    monkeypatch.setattr(coordinator, "MAX_MESSAGES_PER_RUN", 10)  # the worker runs in this process
    stack, core = fake_stack
    owner = stack.owner
    stack.settings.policy = stack.settings.policy.model_copy(update={"max_open": 4})
    for helper_id in ("slot-1", "slot-2", "slot-3"):
        assert (await stack.client.start(helper_request(owner, helper_id))).status == "running"
    await eventually(lambda: core.create_calls == 3)
    for index in range(15):
        helper_id = f"waiting-{index}"
        admission = await stack.client.start(helper_request(owner, helper_id))
        assert (admission.status, admission.ahead) == ("waiting", 0), admission
        assert (await stack.client.close(owner, helper_id)).state is RowState.CLOSED

    runs = [run async for run in stack.env.client.list_workflows(f'WorkflowId = "{coordinator_id(owner)}"')]
    assert len(runs) >= 3, f"expected several runs of the coordinator, got {len(runs)}"
    coordinator_handle = stack.env.client.get_workflow_handle(coordinator_id(owner))
    counts = await coordinator_handle.query(COUNTS, result_type=dict)
    assert (counts["running"], counts["waiting"]) == (3, 0), counts
    rows = await rows_of(stack.store, owner)
    assert {row.helper_id for row in rows if row.state is RowState.RUNNING} == {"slot-1", "slot-2", "slot-3"}
    assert core.create_calls == 3


@pytest.mark.slow
async def test_2500_admissions_through_one_owner(fake_stack: tuple[Stack, FakeCore]):
    """R2, R3, R5, R21: 2,500 admissions (each then closed while waiting) through one owner's coordinator:
    every one is answered, the coordinator continues as new many times without losing its book, rows stay
    within the limit by evicting closed rows, and the three running helpers keep their slots throughout."""
    stack, core = fake_stack
    owner = stack.owner
    # Three long helpers hold the slots, so every further admission waits and is closed while waiting.
    stack.settings.policy = stack.settings.policy.model_copy(update={"max_open": 3 + LANES})
    for helper_id in ("slot-1", "slot-2", "slot-3"):
        assert (await stack.client.start(helper_request(owner, helper_id))).status == "running"
    await eventually(lambda: core.create_calls == 3)

    started = time.monotonic()

    async def lane(number: int) -> int:
        admitted = 0
        for index in range(PER_LANE):
            helper_id = f"w{number}-{index}"
            admission = await stack.client.start(helper_request(owner, helper_id))
            assert admission.status == "waiting", admission
            closed = await stack.client.close(owner, helper_id)
            assert closed.state is RowState.CLOSED
            admitted += 1
            if index % 50 == 49:
                print(f"lane {number}: {admitted} at {time.monotonic() - started:.0f} s", flush=True)
        return admitted

    counts = await asyncio.gather(*(lane(number) for number in range(LANES)))
    elapsed = time.monotonic() - started
    assert sum(counts) == LANES * PER_LANE
    print(f"2,500 admissions and closes in {elapsed:.1f} s")

    runs = [run async for run in stack.env.client.list_workflows(f'WorkflowId = "{coordinator_id(owner)}"')]
    assert len(runs) >= 5, f"expected several runs of the coordinator, got {len(runs)}"
    current = await stack.env.client.get_workflow_handle(coordinator_id(owner)).describe()
    assert current.status is not None and current.status.name == "RUNNING"
    rows = await rows_of(stack.store, owner)
    assert len(rows) <= 20
    assert {row.helper_id for row in rows if row.state is RowState.RUNNING} == {"slot-1", "slot-2", "slot-3"}
    assert core.create_calls == 3  # no waiting helper ever reached the core
