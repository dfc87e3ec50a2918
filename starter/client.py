"""The importable async client Iva uses: start, list, show, close, unreported, read, delivered.

Writes go to the owner's coordinator workflow (start by update-with-start); reads go straight to the
store, so listing works while no worker runs (R27). Every operation is scoped to one owner (R34).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel
from temporalio.client import (
    Client,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from codec.encryption import CodecError
from domain.goals import Goal
from domain.owner_book import RefusalCode
from domain.requests import HelperRequest, RequestError, check_id
from domain.rows import (
    Admission,
    CloseAnswer,
    DeliveredAnswer,
    HelperRow,
    HelperView,
    ReadAnswer,
    RowState,
)
from domain.settings import Settings
from starter import goals
from starter.admission import admit
from starter.errors import HelperRefused, InvalidRequest, Unavailable, refusal_of
from starter.goals import GoalView
from starter.retry import retrying
from store.database import SchemaNotCurrent
from store.helper_store import HelperStore
from store.results import ResultDirectories
from workflows.client import connect_for
from workflows.coordinator import CoordinatorWorkflow, DeliveredRequest, ReadRequest
from workflows.names import coordinator_id


class UsageLine(BaseModel):
    helper_id: str
    seq: int
    goal_id: str | None
    model: str
    outcome_kind: str
    steps: int
    work_tokens: int
    input_tokens: int
    started_at: datetime | None
    finished_at: datetime


class UsageTotal(BaseModel):
    model: str
    helpers: int = 0
    steps: int = 0
    work_tokens: int = 0
    input_tokens: int = 0


class UsageReport(BaseModel):
    owner: str
    helpers: list[UsageLine]
    by_model: list[UsageTotal]


class HelperClient:
    def __init__(self, settings: Settings, store: HelperStore, temporal: Client | None) -> None:
        self.settings = settings
        self.store = store
        self.results = ResultDirectories(settings.results_dir)
        self._temporal = temporal

    @classmethod
    async def connect(cls, settings: Settings, *, temporal: bool = True) -> HelperClient:
        """Open the store; connect to Temporal only when the operation writes (reads need no server)."""
        try:
            store = await HelperStore.connect(settings.store_url)
        except SchemaNotCurrent as error:
            raise Unavailable(str(error)) from None
        except Exception as error:
            raise Unavailable(f"the store at {_redact(settings.store_url)} cannot be opened: {error}") from None
        client: Client | None = None
        if temporal:
            try:
                client = await connect_for(settings)
            except CodecError as error:
                await store.close()
                raise Unavailable(str(error)) from None
            except Exception as error:
                await store.close()
                raise Unavailable(f"Temporal at {settings.temporal_address} does not answer: {error}") from None
        return cls(settings, store, client)

    async def aclose(self) -> None:
        await self.store.close()

    @property
    def temporal(self) -> Client:
        if self._temporal is None:
            raise Unavailable("this client was opened for reading only")
        return self._temporal

    # --- writes: through the owner's coordinator ----------------------------------------------------

    async def start(self, request: HelperRequest | dict[str, Any]) -> Admission:
        """Admit a helper; when this returns, its row exists and its workflow runs (R4)."""
        if not isinstance(request, HelperRequest):
            try:
                request = HelperRequest.parse(request, self.settings.policy.limits)
            except RequestError as error:
                raise InvalidRequest(str(error), {"problems": error.problems}) from None
        else:
            try:
                request.check_against(self.settings.policy.limits)
            except RequestError as error:
                raise InvalidRequest(str(error), {"problems": error.problems}) from None
        try:
            async with asyncio.timeout(self.settings.starter_timeout_ms / 1000):
                return await admit(self.temporal, self.settings, request)
        except TimeoutError:
            raise Unavailable(_no_answer(self.settings)) from None

    async def close(self, owner: str, helper_id: str) -> CloseAnswer:
        self._check_ids(owner, [helper_id])
        answer = await self._update(owner, CoordinatorWorkflow.close, helper_id, missing_helper=helper_id)
        return cast(CloseAnswer, answer)

    async def read(self, owner: str, turn: str, helper_ids: list[str]) -> ReadAnswer:
        """Record that chat turn `turn` read these outcomes; nothing is delivered yet (R28)."""
        self._check_ids(owner, helper_ids)
        _check_turn(turn)
        if not helper_ids:
            raise InvalidRequest("name at least one helper id to read")
        answer = await self._update(
            owner, CoordinatorWorkflow.mark_read, ReadRequest(turn=turn, helper_ids=helper_ids), helper_ids[0]
        )
        return cast(ReadAnswer, answer)

    async def delivered(self, owner: str, turn: str, answer_chars: int) -> DeliveredAnswer:
        """Turn `turn` sent a nonempty answer and completed: what it read is delivered (R28)."""
        self._check_ids(owner, [])
        _check_turn(turn)
        if answer_chars <= 0:
            raise InvalidRequest("nothing is delivered: the turn sent no answer (answer_chars must be > 0)")
        answer = await self._update(
            owner,
            CoordinatorWorkflow.mark_delivered,
            DeliveredRequest(turn=turn, answer_chars=answer_chars),
            missing_helper=None,
        )
        return cast(DeliveredAnswer, answer)

    async def _update(self, owner: str, update: Any, argument: Any, missing_helper: str | None) -> Any:
        handle = self.temporal.get_workflow_handle(coordinator_id(owner))
        try:
            async with asyncio.timeout(self.settings.starter_timeout_ms / 1000):
                return await retrying(lambda: handle.execute_update(update, argument))
        except WorkflowUpdateFailedError as error:
            raise refusal_of(error) from None
        except TimeoutError:
            raise Unavailable(_no_answer(self.settings)) from None
        except RPCError as error:
            if error.status is RPCStatusCode.NOT_FOUND:
                if missing_helper is None:
                    return DeliveredAnswer(owner=owner, turn=getattr(argument, "turn", ""), delivered=[])
                raise HelperRefused(RefusalCode.UNKNOWN_HELPER.value, f"There is no helper {missing_helper}.") from None
            raise Unavailable(f"Temporal did not take the request ({error.status.name}): {error.message}") from None

    # --- Goals: Temporal Schedules whose checks are helpers (R30) --------------------------------------

    async def add_goal(self, data: dict[str, Any]) -> GoalView:
        try:
            goal = Goal.parse(data)
        except RequestError as error:
            raise InvalidRequest(str(error), {"problems": error.problems}) from None
        return await goals.add_goal(self.temporal, self.settings, goal)

    async def list_goals(self, owner: str) -> list[GoalView]:
        self._check_ids(owner, [])
        return await goals.list_goals(self.temporal, owner)

    async def pause_goal(self, owner: str, goal_id: str, *, paused: bool) -> GoalView:
        self._check_ids(owner, [goal_id])
        return await goals.pause_goal(self.temporal, owner, goal_id, paused=paused)

    async def run_goal_now(self, owner: str, goal_id: str) -> GoalView:
        self._check_ids(owner, [goal_id])
        return await goals.run_goal_now(self.temporal, owner, goal_id)

    async def remove_goal(self, owner: str, goal_id: str) -> dict[str, str]:
        self._check_ids(owner, [goal_id])
        return await goals.remove_goal(self.temporal, owner, goal_id)

    # --- reads: straight from the store, no worker needed -------------------------------------------

    async def usage(self, owner: str) -> UsageReport:
        """Usage per helper with its model, and totals per model (R31); kept after rows expire."""
        self._check_ids(owner, [])
        records = await self.store.usage(owner)
        totals: dict[str, UsageTotal] = {}
        for record in records:
            total = totals.setdefault(record["model"], UsageTotal(model=record["model"]))
            total.helpers += 1
            total.steps += record["steps"]
            total.work_tokens += record["work_tokens"]
            total.input_tokens += record["input_tokens"]
        return UsageReport(
            owner=owner,
            helpers=[UsageLine.model_validate(record) for record in records],
            by_model=sorted(totals.values(), key=lambda t: t.model),
        )

    async def list_helpers(self, owner: str, states: Iterable[RowState] | None = None) -> list[HelperView]:
        self._check_ids(owner, [])
        rows = await self.store.rows(owner, states)
        waiting = [r.seq for r in rows if r.state is RowState.WAITING]
        return [self._view(row, ahead=_ahead(row, waiting)) for row in rows]

    async def show(self, owner: str, helper_id: str) -> HelperView:
        self._check_ids(owner, [helper_id])
        row = await self.store.get(owner, helper_id)
        if row is None:
            raise HelperRefused(RefusalCode.UNKNOWN_HELPER.value, f"There is no helper {helper_id}.")
        ahead = await self.store.ahead(owner, row.seq) if row.state is RowState.WAITING else None
        view = self._view(row, ahead=ahead)
        view.last_message = row.last_message or None
        view.full_text = self.results.read_text(Path(row.result_dir))
        return view

    async def unreported(self, owner: str) -> list[HelperView]:
        """Finalized outcomes not yet delivered, with summaries, for the chat's next instruction (R27)."""
        return await self.list_helpers(owner, [RowState.UNREPORTED])

    def _view(self, row: HelperRow, ahead: int | None) -> HelperView:
        # The view is the row's public part: everything but the task, the limits and the writer's bookkeeping.
        return HelperView.model_validate({**row.model_dump(exclude={"last_message"}), "ahead": ahead})

    @staticmethod
    def _check_ids(owner: str, helper_ids: list[str]) -> None:
        try:
            check_id("owner", owner)
            for helper_id in helper_ids:
                check_id("helper id", helper_id)
        except ValueError as error:
            raise InvalidRequest(str(error)) from None


def _ahead(row: HelperRow, waiting_seqs: list[int]) -> int | None:
    if row.state is not RowState.WAITING:
        return None
    return sum(1 for seq in waiting_seqs if seq < row.seq)


def _check_turn(turn: str) -> None:
    if not turn.strip() or len(turn) > 200:
        raise InvalidRequest("turn must be 1-200 characters")


def _no_answer(settings: Settings) -> str:
    return (
        f"no answer within {settings.starter_timeout_ms / 1000:g} s: is a worker polling task queue "
        f"{settings.task_queue!r} on {settings.temporal_address}?"
    )


def _redact(url: str) -> str:
    return url.split("@")[-1]
