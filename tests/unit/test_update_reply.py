"""How a write waits for Temporal's answer (R48): the call that sends it waits for its result until the accept-by
time; a caller's cancellation ends the write at once. The sends here stand in for the SDK's, which report a
cancelled call as WorkflowUpdateRPCTimeoutOrCancelledError."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel
from temporalio.client import WorkflowUpdateHandle, WorkflowUpdateRPCTimeoutOrCancelledError, WorkflowUpdateStage

from config.settings import Settings
from protocol.deadlines import ReplyBy
from protocol.errors import Unavailable
from protocol.update_senders import update_reply


class Held:
    """A send the server never answers: each call waits until it is cut, as the SDK's does."""

    def __init__(self) -> None:
        self.stages: list[WorkflowUpdateStage] = []
        self.ids: list[str] = []
        self.sent = asyncio.Event()

    async def __call__(self, update_id: str, stage: WorkflowUpdateStage) -> WorkflowUpdateHandle[BaseModel]:
        self.stages.append(stage)
        self.ids.append(update_id)
        self.sent.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise WorkflowUpdateRPCTimeoutOrCancelledError() from None
        raise AssertionError("unreachable")


async def test_a_write_cut_at_its_accept_by_time_asks_once_by_its_id_then_is_not_taken() -> None:
    held = Held()
    by = ReplyBy.within(0.6)
    with pytest.raises(Unavailable, match="did not accept"):
        await update_reply(Settings(), held, lambda: f"admit/h1/{len(held.ids)}", by, "the admission of h1")
    assert held.stages == [WorkflowUpdateStage.COMPLETED, WorkflowUpdateStage.ACCEPTED]
    assert held.ids[0] == held.ids[1], "the look asks for the same update"


async def test_a_cancelled_caller_sends_nothing_more() -> None:
    held = Held()
    writing: asyncio.Task[BaseModel] = asyncio.create_task(
        update_reply(Settings(), held, lambda: "admit/h1/x", ReplyBy.within(30), "the admission of h1")
    )
    await asyncio.wait_for(held.sent.wait(), 5)
    writing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await writing
    assert held.stages == [WorkflowUpdateStage.COMPLETED]
