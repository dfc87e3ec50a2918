"""Reading, delivery and the chat outbox of a coordinator (R26-R28): a mixin of `CoordinatorWorkflow`.

A chat turn reads unreported outcomes (`mark_read`), answers, then reports the answer (`mark_delivered`): only
what that turn read becomes delivered. The outbox offers one system event at a time while the chat is idle.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.chat import ChatActivities
    from activities.rows import RowActivities
    from domain.activity_io import CoordinatorWrite, OfferEvent, OfferResult, RowKey
    from domain.book import (
        OFFER_GIVE_UP,
        Entry,
        EventState,
        OfferOutcome,
        OwnerBook,
        Refusal,
        apply_delivered,
        apply_offer_result,
        apply_read,
        decide_read,
        event_due,
        finishing,
        next_event,
        start_offer,
    )
    from domain.rows import DeliveredAnswer, ReadAnswer, RowState
    from protocol.errors import ErrorType
    from protocol.messages import MARK_DELIVERED, MARK_READ, DeliveredRequest, ReadRequest
    from workflows import options
    from workflows.failures import CALL_FAILED

READ_WAIT = timedelta(seconds=10)
OUTBOX_AFTER_TIMERS_PATCH = "outbox-after-timers"
# An offer's first attempt is a local activity in the task that saw the outcome (runs recorded before offer from
# an activity only, one activity task and one workflow task more per event).
OFFER_FIRST_IN_TASK_PATCH = "offer-first-in-task"
OFFER_BACKOFF_FIRST = timedelta(seconds=2)
OFFER_BACKOFF_MAX = timedelta(minutes=5)


def refused(refusal: Refusal) -> ApplicationError:
    return ApplicationError(
        refusal.message, refusal.model_dump(mode="json"), type=ErrorType.HELPER_REFUSED, non_retryable=True
    )


class CoordinatorDelivery:
    """The delivery half of `CoordinatorWorkflow`; the attributes are the workflow's."""

    book: OwnerBook
    stopping: bool
    messages_this_run: int
    armed_wakeup: datetime | None
    # Provided by `CoordinatorWorkflow`; declared here so the mixin type-checks without stubs.
    _refuse_while_stopping: Callable[[], None]
    _row_key: Callable[[Entry], RowKey]
    _timer_outdated: Callable[[], bool]

    # --- reading and delivery (R26-R28) ------------------------------------------------------------

    @workflow.update(name=MARK_READ)
    async def mark_read(self, request: ReadRequest) -> ReadAnswer:
        self.messages_this_run += 1
        # The row can show an outcome a moment before the helper's finished notice reaches this book.
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(
                lambda: not finishing(self.book, request.helper_ids),
                timeout=READ_WAIT,
                timeout_summary="wait for finished notices",
            )
        refusal = decide_read(self.book, request.helper_ids)
        if refusal is not None:
            raise refused(refusal)
        read = apply_read(self.book, request.turn, request.helper_ids)
        return ReadAnswer(owner=self.book.owner, turn=request.turn, read=read)

    @mark_read.validator
    def _validate_read(self, request: ReadRequest) -> None:
        self._refuse_while_stopping()
        refusal = decide_read(self.book, request.helper_ids, allow_finishing=True)
        if refusal is not None:
            raise refused(refusal)

    @workflow.update(name=MARK_DELIVERED)
    async def mark_delivered(self, request: DeliveredRequest) -> DeliveredAnswer:
        """The turn that read these outcomes sent a nonempty answer and completed (R28)."""
        self.messages_this_run += 1
        delivered = apply_delivered(self.book, request.turn, workflow.now())
        for entry in delivered:
            await workflow.execute_local_activity_method(
                RowActivities.coordinator_write,
                CoordinatorWrite(
                    row=self._row_key(entry),
                    state=RowState.DELIVERED,
                    delivered_at=entry.delivered_at,
                    keep_until=entry.keep_until,
                ),
                **options.STORE_WRITE,
            )
        return DeliveredAnswer(owner=self.book.owner, turn=request.turn, delivered=[e.helper_id for e in delivered])

    @mark_delivered.validator
    def _validate_delivered(self, request: DeliveredRequest) -> None:
        self._refuse_while_stopping()
        if request.answer_chars <= 0:
            raise ApplicationError(
                "nothing is delivered: the turn sent no answer", type=ErrorType.HELPER_REFUSED, non_retryable=True
            )

    async def _outbox(self) -> None:
        """Offer one system event when the chat is idle; back off while it is busy or down (R26)."""
        backoff = OFFER_BACKOFF_FIRST
        # An offer starts only once the run loop has re-armed its timer for the book as it is now, so the two
        # coroutines' commands come in one order however the SDK groups events into activations. Without it a
        # worker that picks the run up cold can order them differently from the history and fail every task
        # with a nondeterminism error (sdk-python#1591: an offer's result and the next signals in one
        # activation on replay, in two when live; the chaos soak met it).
        after_timers = workflow.patched(OUTBOX_AFTER_TIMERS_PATCH)
        while not self.stopping:
            await workflow.wait_condition(
                lambda: self.stopping or (self._event_due() and (not after_timers or self._timers_armed()))
            )
            if self.stopping:
                return
            event = next_event(self.book)
            if event is None:
                continue
            language = self._language_of(event.helper_ids)
            start_offer(event, workflow.now())
            offer = OfferEvent(
                owner=self.book.owner,
                key=event.key,
                helper_ids=event.helper_ids,
                language=language,
                attempts=event.attempts,
            )
            result = await self._offer(offer)
            outcome = apply_offer_result(
                self.book, event, result.state, result.receipt_id, result.error, workflow.now(), OFFER_GIVE_UP
            )
            if outcome is not OfferOutcome.RETRY:
                if outcome is OfferOutcome.GIVEN_UP:
                    workflow.logger.warning("gave up system event %s after %s attempts", event.key, event.attempts)
                backoff = OFFER_BACKOFF_FIRST
                continue
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: self.stopping, timeout=backoff, timeout_summary="chat busy or down"
                )
            backoff = min(backoff * 2, OFFER_BACKOFF_MAX)

    async def _offer(self, offer: OfferEvent) -> OfferResult:
        """One offer. Its first attempt is a local activity bounded at a second (`options.CHAT_OFFER_IN_TASK`),
        which costs no activity task and no workflow task of its own; it holds the coordinator's task, so a chat
        that takes longer gets the offer again at once from an activity, outside the task, where the owner's
        next admission never waits for it (tests/e2e/test_slow_chat.py). An offer that timed out or whose
        worker died (its one attempt) is uncertain: the chat may have it, and a repeat with the same key is
        harmless; before, the error ended the outbox."""
        if workflow.patched(OFFER_FIRST_IN_TASK_PATCH):
            try:
                return await workflow.execute_local_activity_method(
                    ChatActivities.offer_chat_event, offer, **options.CHAT_OFFER_IN_TASK
                )
            except CALL_FAILED as error:
                workflow.logger.info("offer of system event %s goes on as an activity: %s", offer.key, error)
                offer = offer.model_copy(update={"attempts": offer.attempts + 1})
        try:
            return await workflow.execute_activity_method(ChatActivities.offer_chat_event, offer, **options.CHAT_OFFER)
        except ActivityError as error:
            workflow.logger.warning("offer of system event %s failed: %s", offer.key, error.cause or error)
            return OfferResult(state=EventState.UNCERTAIN, error=str(error.cause or error))

    def _event_due(self) -> bool:
        return event_due(self.book)

    def _timers_armed(self) -> bool:
        return not self._timer_outdated()

    def _language_of(self, helper_ids: list[str]) -> str:
        for helper_id in helper_ids:
            entry = self.book.entries.get(helper_id)
            if entry is not None:
                return entry.language
        return "en"
