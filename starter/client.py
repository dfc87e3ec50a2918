"""The importable async client Iva uses: start, answer, list, show, close, unreported, read, delivered.

Writes go to the owner's coordinator workflow (start by update-with-start); reads go straight to the
store, so listing works while no worker runs (R27). Every operation is scoped to one owner (R34).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel
from temporalio.client import (
    Client,
)
from temporalio.runtime import LogForwardingConfig, LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.service import RPCError

from codec.encryption import CodecError
from config.settings import Settings
from domain.book import answering, outbox
from domain.goals import Goal
from domain.ids import clip
from domain.messages.updates import (
    Admission,
    AnsweredItem,
    AnswerRefusedItem,
    AnswerRequest,
    AnswerResult,
    AnswersResult,
    ChatIdleAnswer,
    CloseAnswer,
    DeliveredAnswer,
    DeliveredRequest,
    ReadAnswer,
    ReadRequest,
)
from domain.requests import HelperRequest
from protocol.connection import connect_for
from protocol.deadlines import ReplyBy, accept_within_s, reply_by
from protocol.errors import (
    UNKNOWN_HELPER,
    HelperRefused,
    InvalidConfiguration,
    InvalidRequest,
    StarterError,
    Unavailable,
)
from protocol.temporal_errors import refusal_of_rpc, unreachable
from protocol.update_senders import admit, answer_helper, close_helper, mark_delivered, mark_read, tell_chat_idle
from starter.backpressure import WriteGate, WriteObserver
from starter.inputs import (
    check_goal_ids,
    check_ids,
    parse_goal,
    parse_request,
    scrub,
)
from starter.reads import StoreReader, open_store
from store.reads import RowReader

if TYPE_CHECKING:
    from starter.goals import GoalRemoved, GoalView

# Loaded only by the commands that use them, so each write loads little beyond the Temporal client: the model
# catalog's check (starter.catalog) for `start` and `goal add`, the Goal Schedules (starter.goals) for `goal` (R43).

Reply = TypeVar("Reply", bound=BaseModel)


class HelperClient(StoreReader):
    """Everything Iva does: the reads of `StoreReader`, and the writes through the owner's coordinator."""

    def __init__(
        self, settings: Settings, store: RowReader, temporal: Client | None, observe_writes: WriteObserver | None = None
    ) -> None:
        super().__init__(settings, store)
        self._temporal = temporal
        self.gate = WriteGate(
            settings.starter_max_in_flight, accept_within_s(settings.starter_timeout_ms / 1000), observe_writes
        )

    @classmethod
    async def connect(cls, settings: Settings, *, temporal: bool = True, by: ReplyBy | None = None) -> HelperClient:
        """Open the store; connect to Temporal only when the operation writes (reads need no server), by `by`
        (HELPER_STARTER_TIMEOUT_MS from now unless given)."""
        if temporal and (problem := settings.encryption_problem()):
            raise InvalidConfiguration(problem)
        store = await open_store(settings)
        client: Client | None = None
        if temporal:
            try:
                client = await connect_temporal_client(settings, by)
            except BaseException:
                await store.close()
                raise
        return cls(settings, store, client)

    @property
    def temporal(self) -> Client:
        if self._temporal is None:
            raise Unavailable("this client was opened for reading only")
        return self._temporal

    # --- writes: through the owner's coordinator ----------------------------------------------------

    async def start(self, request: HelperRequest | dict[str, Any], *, by: ReplyBy | None = None) -> Admission:
        """Admit a helper; when this returns, its row exists and its workflow runs (R4). Answered by `by`
        (HELPER_STARTER_TIMEOUT_MS from now); otherwise Accepted, Busy or Unavailable say what happened (R48).
        A dict is checked here (`starter.inputs.parse_request`); the coordinator checks every request again."""
        by = by or reply_by(self.settings)
        if not isinstance(request, HelperRequest):
            request = parse_request(request, self.settings)
        await check_model(self.settings, request.model)
        return await self._write(lambda: admit(self.temporal, self.settings, request, by), by)

    async def close(self, owner: str, helper_id: str, *, by: ReplyBy | None = None) -> CloseAnswer:
        by = by or reply_by(self.settings)
        check_ids(owner, [helper_id])
        return await self._write(lambda: close_helper(self.temporal, self.settings, owner, helper_id, by), by)

    async def answer(self, request: AnswerRequest, *, by: ReplyBy | None = None) -> AnswerResult:
        """Answer a helper's question or authorization wait (`starter.inputs.answer_request` builds the request) with
        an offered option's id (`grant` or `deny` for an authorization) or free text (R49). The first valid answer is
        the only one: asking again, with this answer or another, returns that first one (`repeated`) and starts
        nothing. It admits the follow-up that goes on from it, as `start --follow-up` would."""
        by = by or reply_by(self.settings)
        try:
            return await self._write(lambda: answer_helper(self.temporal, self.settings, request, by), by)
        except HelperRefused as refused:
            if refused.code != UNKNOWN_HELPER:
                raise
            # The coordinator no longer knows the helper: a wait that ended is refused with how, for as long as
            # its record is kept (R56).
            records = await self.store.wait_records(request.owner, request.helper_id, limit=1)
            if not records:
                raise
            late = answering.late(records[0])
            details = {"ended": records[0].ended.value, "ended_at": records[0].ended_at.isoformat()}
            raise HelperRefused(late.code, late.message, details) from None

    async def answer_all(
        self, owner: str, requests: list[AnswerRequest], *, by: ReplyBy | None = None
    ) -> AnswersResult:
        """Several answers of one owner's (`starter.inputs.answer_requests` builds them, at most 20), each judged
        alone exactly as `answer` judges it, one after another in the order given (so of two answers to one
        question the earlier is the one): each gets its own result or error, and one refused changes nothing of
        another (R56). All share the call's bound: one not sent in time is `unavailable`, nothing taken."""
        by = by or reply_by(self.settings)
        for request in requests:  # all checked before any is sent
            if request.owner != owner:
                raise InvalidRequest(f"answer to {request.helper_id} names owner {request.owner}, not {owner}")
        answered = []
        for request in requests:
            try:
                result = await self.answer(request, by=by)
            except StarterError as error:
                refused = AnswerRefusedItem(code=error.code, message=error.message)
                answered.append(AnsweredItem(helper_id=request.helper_id, error=refused))
            else:
                answered.append(AnsweredItem(helper_id=request.helper_id, result=result))
        return AnswersResult(owner=owner, answers=answered)

    async def read(self, request: ReadRequest, *, by: ReplyBy | None = None) -> ReadAnswer:
        """Record that a chat turn read these outcomes (`starter.inputs.read_request` builds the request); nothing
        is delivered yet (R28)."""
        by = by or reply_by(self.settings)
        return await self._write(lambda: mark_read(self.temporal, self.settings, request, by), by)

    async def delivered(self, request: DeliveredRequest, *, by: ReplyBy | None = None) -> DeliveredAnswer:
        """The turn that read sent a nonempty answer and completed (`starter.inputs.delivered_request` builds the
        request): what it read is delivered (R28)."""
        by = by or reply_by(self.settings)
        return await self._write(lambda: mark_delivered(self.temporal, self.settings, request, by), by)

    async def chat_idle(self, owner: str, *, by: ReplyBy | None = None) -> ChatIdleAnswer:
        """The owner's chat turned idle (a turn ended, or the chat answers again after being down): an event
        waiting for it is offered within seconds rather than after the outbox's backoff. The store says whether one
        waits, so a chat that calls this after every turn costs Temporal nothing while none does (R26)."""
        by = by or reply_by(self.settings)
        check_ids(owner, [])
        since = datetime.now(UTC) - outbox.STILL_OFFERED
        states = [state.value for state in outbox.OFFERED_AGAIN]
        if not await self.store.event_offered_since(owner, states, since):
            return ChatIdleAnswer(owner=owner, told=False)
        return ChatIdleAnswer(owner=owner, told=await tell_chat_idle(self.temporal, self.settings, owner, by))

    async def _write(self, send: Callable[[], Awaitable[Reply]], by: ReplyBy) -> Reply:
        """One write through this process's gate (as many in flight as the runtime answers in time, R48)."""
        try:
            async with self.gate.turn(by):
                return await send()
        except Unavailable as error:
            if error.retry_after_s is None:  # not taken in time: ask again once this process has worked off its own
                retry = self.gate.promise_retry_s(by)
                raise Unavailable(error.message, error.details, retry_after_s=retry, shown=error.shown) from None
            raise

    # --- Goals: Temporal Schedules whose checks are helpers (R30) --------------------------------------

    async def add_goal(self, data: Goal | dict[str, Any]) -> GoalView:
        goal = parse_goal(data.model_dump() if isinstance(data, Goal) else data)
        await check_model(self.settings, goal.model)
        from starter import goals

        return await goals.add_goal(self.temporal, self.settings, goal)

    async def list_goals(self, owner: str) -> list[GoalView]:
        check_ids(owner, [])
        from starter import goals

        return await goals.list_goals(self.temporal, owner)

    async def pause_goal(self, owner: str, goal_id: str, *, paused: bool) -> GoalView:
        check_goal_ids(owner, goal_id)
        from starter import goals

        return await goals.pause_goal(self.temporal, owner, goal_id, paused=paused)

    async def run_goal_now(self, owner: str, goal_id: str) -> GoalView:
        check_goal_ids(owner, goal_id)
        from starter import goals

        return await goals.run_goal_now(self.temporal, owner, goal_id)

    async def remove_goal(self, owner: str, goal_id: str) -> GoalRemoved:
        check_goal_ids(owner, goal_id)
        from starter import goals

        return await goals.remove_goal(self.temporal, owner, goal_id)


async def connect_temporal_client(settings: Settings, by: ReplyBy | None = None) -> Client:
    """The Temporal client with the runtime's data converter and codec, by `by` (HELPER_STARTER_TIMEOUT_MS from now
    unless given); InvalidConfiguration when the codec keys are wrong, Unavailable when Temporal does not answer."""
    by = by or reply_by(settings)
    address, seconds = settings.temporal_address, by.left()
    try:
        async with asyncio.timeout(seconds):
            return await connect_for(settings, _quiet_runtime())
    except CodecError as error:
        raise InvalidConfiguration(scrub(str(error))) from None
    except TimeoutError:
        raise unreachable(address, f"no answer within {seconds:.1f} s", timed_out=True) from None
    except RPCError as error:
        raise refusal_of_rpc(error, "the connection", address) from None
    except Exception as error:  # the SDK's connect error: the transport's words, not the caller's to act on
        raise unreachable(address, scrub(f"{type(error).__name__}: {error}")) from None


# --- input checks: pure, so the console script runs them before it connects to anything (R42) -----------


# How long the starter asks the core for its models before leaving the check to create.
MODEL_CHECK_S = 3.0


async def check_model(settings: Settings, model: str) -> None:
    """Refuse a model the core does not offer, naming those it does (exit 2), when the core publishes a catalog
    (`GET /v1/models`). A core without one, or one that does not answer within MODEL_CHECK_S, leaves the check to
    the create, whose refusal becomes the helper's failed outcome."""
    from starter.catalog import models_offering  # the core client and httpx: only a command that asks loads them

    offered = await models_offering(
        settings.core_url, model, settings.policy.check_ms, MODEL_CHECK_S, settings.core_proxy
    )
    if offered is not None and model not in offered:
        names = ", ".join(offered[:20]) + (", …" if len(offered) > 20 else "")
        raise InvalidRequest(
            f"model {clip(model)!r} is not offered by the core at {settings.core_url}; it offers: {names or 'none'}",
            {"problems": [f"model: not offered; use one of: {names or 'none'}"]},
        )


_RUNTIME: list[Runtime] = []


def _quiet_runtime() -> Runtime:
    """The SDK core's own warnings (retries while a server restarts) go to Python logging, so to stderr:
    stdout carries exactly one JSON object (R42)."""
    if not _RUNTIME:
        forwarding = LogForwardingConfig(logger=logging.getLogger("temporalio.core"))
        logging_config = LoggingConfig(
            filter=TelemetryFilter(core_level="WARN", other_level="ERROR"), forwarding=forwarding
        )
        _RUNTIME.append(Runtime(telemetry=TelemetryConfig(logging=logging_config)))
    return _RUNTIME[0]
