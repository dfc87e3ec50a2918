"""Typed senders of the coordinator's updates, for every caller outside the workflows: the starter, Goal checks.

Updates, because each caller waits for the coordinator's answer, and only a client outside the workflows can send
one; the workflows signal each other through `protocol.signal_senders`, the other half of the pair.

Admission goes by update-with-start: the one way a helper enters the runtime (R4). The other updates take
and return the models named here (`domain.messages.updates`); their names come from `protocol.names`.

Every send is answered by its `ReplyBy` with one of three true answers (R48): the update's result; `Accepted`
when Temporal accepted the update (it is durable and will be carried out) but its result did not come in time;
`Unavailable` when Temporal did not accept it in time, which the update's accept-by time makes final: the
coordinator refuses it if it arrives later (protocol.deadlines).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from functools import partial
from typing import NoReturn, TypeVar

from pydantic import BaseModel
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowUpdateFailedError,
    WorkflowUpdateHandle,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from codec.encryption import CodecError
from config.settings import Settings
from domain.messages.updates import (
    Admission,
    AnswerRequest,
    AnswerResult,
    CloseAnswer,
    DeliveredAnswer,
    DeliveredRequest,
    ReadAnswer,
    ReadRequest,
)
from domain.messages.workflows import CoordinatorStart
from domain.requests import HelperRequest
from protocol.deadlines import ReplyBy
from protocol.errors import (
    NOT_TAKEN,
    Accepted,
    InvalidConfiguration,
    InvalidRequest,
    Unavailable,
    unknown_helper,
)
from protocol.names import (
    ADMIT,
    ANSWER,
    CHAT_IDLE,
    CLOSE_HELPER,
    COORDINATOR_WORKFLOW,
    HELPER_OWNER,
    MARK_DELIVERED,
    MARK_READ,
    coordinator_id,
    owner_priority,
)
from protocol.temporal_errors import is_transient, refusal_of, refusal_of_rpc, unreachable

Reply = TypeVar("Reply", bound=BaseModel)
# An operation whose send was cut has its outcome set at once; this only bounds the look.
SETTLE_S = 0.1
# The pauses between sends of an update turned away while its coordinator continues as new.
FIRST_PAUSE = 0.05
LONGEST_PAUSE = 1.0


async def admit(temporal: Client, settings: Settings, request: HelperRequest, by: ReplyBy) -> Admission:
    """Admit one helper through its owner's coordinator, starting the coordinator on first use.

    When this returns, the row exists and the helper's workflow runs; the answer says whether it runs
    now or waits, and how many are ahead. Raises HelperRefused, InvalidRequest, Accepted, Busy or Unavailable.
    """

    operations: list[WithStartWorkflowOperation[None, None]] = []

    def start() -> WithStartWorkflowOperation[None, None]:
        # An operation is used once: every attempt needs its own.
        operation: WithStartWorkflowOperation[None, None] = WithStartWorkflowOperation(
            COORDINATOR_WORKFLOW,
            CoordinatorStart(owner=request.owner, policy=settings.policy),
            id=coordinator_id(request.owner),
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            task_queue=settings.task_queue,
            search_attributes=TypedSearchAttributes([SearchAttributePair(HELPER_OWNER, request.owner)]),
            static_summary=f"coordinator of {request.owner}'s helpers",
            priority=owner_priority(request.owner),
        )
        operations.append(operation)
        return operation

    try:
        return await update_reply(
            settings,
            lambda update_id, stage: temporal.start_update_with_start_workflow(
                ADMIT,
                request,
                result_type=Admission,
                start_workflow_operation=start(),
                wait_for_stage=stage,
                id=update_id,
            ),
            # A fresh update id: a repeated request reaches the handler, which answers with the helper's current
            # state and starts nothing (R5), instead of a replay of the first answer.
            lambda: by.update_id("admit", request.helper_id),
            by,
            f"the admission of {request.helper_id}",
        )
    finally:
        for operation in operations:
            await _settled(operation)


async def _settled(operation: WithStartWorkflowOperation[None, None]) -> None:
    """Take the start's outcome from an operation whose send was cut at its bound: the SDK sets it whether or not
    anyone asks, and asyncio would log a cancelled one as never retrieved, once per admission of a burst."""
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await asyncio.wait_for(operation.workflow_handle(), SETTLE_S)


# An owner without a coordinator was never admitted a helper: a close, an answer or a read names none of its
# helpers, and a delivery has nothing that was read.


async def close_helper(temporal: Client, settings: Settings, owner: str, helper_id: str, by: ReplyBy) -> CloseAnswer:
    what = f"the close of {helper_id}"
    absent = partial(_no_helper, helper_id)
    return await _update(temporal, settings, owner, CLOSE_HELPER, helper_id, CloseAnswer, by, what, absent)


async def mark_read(temporal: Client, settings: Settings, request: ReadRequest, by: ReplyBy) -> ReadAnswer:
    absent = partial(_no_helper, request.helper_ids[0])
    owner = _addressed(request.owner)
    return await _update(temporal, settings, owner, MARK_READ, request, ReadAnswer, by, "the read", absent)


async def mark_delivered(
    temporal: Client, settings: Settings, request: DeliveredRequest, by: ReplyBy
) -> DeliveredAnswer:
    owner = _addressed(request.owner)

    def absent() -> DeliveredAnswer:
        return DeliveredAnswer(owner=owner, turn=request.turn, delivered=[])

    what = "the delivery"
    return await _update(temporal, settings, owner, MARK_DELIVERED, request, DeliveredAnswer, by, what, absent)


async def answer_helper(temporal: Client, settings: Settings, request: AnswerRequest, by: ReplyBy) -> AnswerResult:
    """The owner's answer to a question: the update's id names the helper and the question it answers."""
    what = f"the answer to {request.helper_id}"
    subject = f"{request.helper_id}/{request.answer.question_id}"
    absent = partial(_no_helper, request.helper_id)
    return await _update(temporal, settings, request.owner, ANSWER, request, AnswerResult, by, what, absent, subject)


async def tell_chat_idle(temporal: Client, settings: Settings, owner: str, by: ReplyBy) -> bool:
    """The owner's chat turned idle while an event waited for it: the coordinator's outbox offers it now. A signal,
    since nothing is answered back and a repeat is harmless (one more offer that asks the chat whether it is idle).
    False when the owner has no coordinator."""
    what = "the chat's idle notice"
    try:
        async with asyncio.timeout(by.left()):
            await temporal.get_workflow_handle(coordinator_id(owner)).signal(CHAT_IDLE)
    except TimeoutError:
        raise unreachable(settings.temporal_address, f"{what}: no answer in time", timed_out=True) from None
    except RPCError as error:
        if error.status is RPCStatusCode.NOT_FOUND:
            return False
        raise refusal_of_rpc(error, what, settings.temporal_address) from None
    return True


def _addressed(owner: str | None) -> str:
    if owner is None:
        raise InvalidRequest("owner: name the owner whose coordinator the request is for")
    return owner


def _no_helper(helper_id: str) -> NoReturn:
    raise unknown_helper(helper_id)


async def _update(
    temporal: Client,
    settings: Settings,
    owner: str,
    name: str,
    argument: object,
    reply: type[Reply],
    by: ReplyBy,
    what: str,
    absent: Callable[[], Reply],
    subject: str | None = None,
) -> Reply:
    """One update to the owner's coordinator, asked again while it continues as new (all are idempotent). Its id
    names `subject` (the owner unless given); `absent` answers when the owner has no coordinator."""
    return await update_reply(
        settings,
        lambda update_id, stage: temporal.get_workflow_handle(coordinator_id(owner)).start_update(
            name, argument, result_type=reply, wait_for_stage=stage, id=update_id
        ),
        lambda: by.update_id(name, subject or owner),
        by,
        what,
        absent,
    )


async def update_reply(
    settings: Settings,
    send: Callable[[str, WorkflowUpdateStage], Awaitable[WorkflowUpdateHandle[Reply]]],
    new_id: Callable[[], str],
    by: ReplyBy,
    what: str,
    absent: Callable[[], Reply] | None = None,
) -> Reply:
    """Send and wait for the result in the same call until the update's accept-by time; one whose result has not
    come by then is asked for once more by its id, which says whether Temporal accepted it: its result if it comes
    before the answer is due, else `Accepted`; not accepted, `Unavailable` (the coordinator refuses it from its
    accept-by time on). An update turned away while the coordinator continues as new is sent again a moment later
    under a new id (every write is idempotent). `absent` answers for a coordinator that does not exist (an
    admission starts its own)."""
    bound = f"{by.left():.0f} s"
    not_accepted = (
        f"{NOT_TAKEN}: the runtime did not accept {what} within {bound}, and it will refuse it from now on; asking "
        f"again is safe (is a worker polling task queue {settings.task_queue!r} on {settings.temporal_address}?)"
    )
    pause = FIRST_PAUSE
    turned_away: str | None = None  # the last answer that meant "ask again", kept as the cause if time runs out
    while True:
        update_id = new_id()
        try:
            try:
                # One call in the usual case: the server answers it with the result.
                async with asyncio.timeout(by.left_to_accept()):
                    handle = await send(update_id, WorkflowUpdateStage.COMPLETED)
            except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
                _unless_cancelled()
                async with asyncio.timeout(by.left()):
                    handle = await send(update_id, WorkflowUpdateStage.ACCEPTED)
            # The handle holds the outcome of an update that completed or was rejected; an accepted one's result is
            # awaited until the answer is due.
            try:
                async with asyncio.timeout(by.left()):
                    return await handle.result()
            except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
                raise Accepted(
                    f"the runtime accepted {what}, so it will be carried out, but its answer did not come within "
                    f"{bound}: look at the helper (show, watch), or ask again, which answers with the same helper",
                    {"update_id": handle.id},
                ) from None
        except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
            _unless_cancelled()
            raise Unavailable(not_accepted) from None
        except CodecError as error:
            # The runtime's answer is encrypted with a key this process lacks: the keys differ, and asking again
            # unchanged cannot help. Whether the runtime could read the request depends on which key differs.
            raise InvalidConfiguration(
                f"the runtime's answer to {what} cannot be read: {error}; fix HELPER_CODEC_KEYS, then ask again "
                "(asking again is safe)"
            ) from None
        except WorkflowUpdateFailedError as error:
            if not is_transient(error):
                raise refusal_of(error) from None
        except RPCError as error:
            if error.status is RPCStatusCode.NOT_FOUND and absent is not None and not is_transient(error):
                return absent()
            if not is_transient(error):
                raise refusal_of_rpc(error, what, settings.temporal_address) from None
            turned_away = f"{error.status.name}: {error.message}"
        if by.left() <= pause:
            raise Unavailable(not_accepted, cause=turned_away)
        await asyncio.sleep(pause)
        pause = min(pause * 2, LONGEST_PAUSE)


def _unless_cancelled() -> None:
    """The SDK reports a cancelled call as WorkflowUpdateRPCTimeoutOrCancelledError, whether this write's own bound
    cut it (`asyncio.timeout` has taken its cancel back by then) or its caller was cancelled: the caller's
    cancellation goes on, and nothing more is sent."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
