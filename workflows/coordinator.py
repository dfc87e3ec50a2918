"""The coordinator workflow: one per owner. It admits helpers, lends running slots, keeps the rows.

Iva reaches it by update-with-start (`admit`), so the first request of an owner starts it. Every
decision is a pure function of `domain.owner_book`; handlers decide synchronously (no await before
the decision), so concurrent handlers never see a half-changed book. Admission answers at once: a
helper that must wait gets its slot later by signal, never by a blocked update (the server allows
only 10 updates in flight per workflow). It continues as new, carrying the book, long before the
history or the per-run update limit is reached.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from pydantic import BaseModel
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.admission import AdmissionActivities
    from activities.chat import ChatActivities
    from activities.rows import RowActivities
    from domain.activity_io import (
        AdmitHelper,
        CoordinatorWrite,
        HelperStart,
        NewRow,
        OfferEvent,
        RemoveRows,
        RowKey,
        RowToRemove,
    )
    from domain.limits import Policy, effective_limits
    from domain.owner_book import (
        AlreadyAdmitted,
        CloseAction,
        Entry,
        EventState,
        FinishedNotice,
        OwnerBook,
        Refusal,
        RefusalCode,
        abandon_event,
        apply_admission,
        apply_closed_by_coordinator,
        apply_delivered,
        apply_event_delivered,
        apply_finished,
        apply_read,
        decide_admission,
        decide_close,
        decide_read,
        expired_leases,
        expired_rows,
        finishing,
        forget_gone_helper,
        grant_slots,
        next_event,
        next_wakeup,
        release_slot,
        remove_entries,
        summarize_book,
        unannounced,
        undo_admission,
    )
    from domain.requests import HelperRequest, RequestError
    from domain.rows import Admission, AdmissionStatus, CloseAnswer, DeliveredAnswer, ReadAnswer, RowState
    from workflows import options
    from workflows.helper import HelperWorkflow
    from workflows.names import HELPER_CLOSED, HELPER_FINISHED, helper_workflow_id

REFUSED = "HelperRefused"
BUSY = "CoordinatorBusy"
# Continue as new well before the server's 2,000 updates per run and its history warnings, and while a
# replay of the run (after a worker restart, or a completion the server turns back) is still quick.
MAX_MESSAGES_PER_RUN = 500
MAX_EVENTS_PER_RUN = 2_500
CLOSE_ACK_WAIT = timedelta(seconds=30)
READ_WAIT = timedelta(seconds=10)
OFFER_BACKOFF_FIRST = timedelta(seconds=2)
OFFER_BACKOFF_MAX = timedelta(minutes=5)
# An event the chat could not take for this long is given up: the outcomes stay unreported and appear in
# the chat's next instruction anyway (seed: "a lost event leaves the outcome for the next owner message").
OFFER_GIVE_UP = timedelta(hours=1)


class CoordinatorStart(BaseModel):
    owner: str
    policy: Policy = Policy()
    book: OwnerBook | None = None


class DeliveredRequest(BaseModel):
    turn: str
    answer_chars: int


class ReadRequest(BaseModel):
    turn: str
    helper_ids: list[str]


def refused(refusal: Refusal) -> ApplicationError:
    return ApplicationError(refusal.message, refusal.model_dump(mode="json"), type=REFUSED, non_retryable=True)


@workflow.defn
class CoordinatorWorkflow:
    @workflow.init
    def __init__(self, start: CoordinatorStart) -> None:
        self.book = start.book or OwnerBook(owner=start.owner, policy=start.policy)
        self.messages_this_run = 0
        self.stopping = False
        self.armed_wakeup = next_wakeup(self.book)

    # --- the run loop: timers for retention and leases, the outbox, continue-as-new ---------------

    @workflow.run
    async def run(self, start: CoordinatorStart) -> None:
        outbox = asyncio.ensure_future(self._outbox())
        while not self._should_continue_as_new():
            self.armed_wakeup = next_wakeup(self.book)
            timeout = None
            if self.armed_wakeup is not None:
                timeout = max(self.armed_wakeup - workflow.now(), timedelta(seconds=1))
            try:
                await workflow.wait_condition(
                    lambda: self._should_continue_as_new() or next_wakeup(self.book) != self.armed_wakeup,
                    timeout=timeout,
                    timeout_summary="next row expiry or slot lease end",
                )
            except TimeoutError:
                await self._expire()
        self.stopping = True
        await outbox
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(CoordinatorStart(owner=self.book.owner, policy=self.book.policy, book=self.book))

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or self.messages_this_run >= MAX_MESSAGES_PER_RUN
            or info.get_current_history_length() >= MAX_EVENTS_PER_RUN
        )

    async def _expire(self) -> None:
        now = workflow.now()
        for helper_id in expired_leases(self.book, now):
            workflow.logger.warning("slot lease of %s/%s ended without its notice", self.book.owner, helper_id)
            release_slot(self.book, helper_id)
        await self._hand_out_slots()
        expired = expired_rows(self.book, now)
        if expired:
            await self._remove_rows([self.book.entries[helper_id] for helper_id in expired])

    # --- admission (R1-R5) --------------------------------------------------------------------------

    @workflow.update
    async def admit(self, request: HelperRequest) -> Admission:
        self.messages_this_run += 1
        decision = decide_admission(self.book, request)
        if isinstance(decision, Refusal):
            raise refused(decision)
        if isinstance(decision, AlreadyAdmitted):
            return self._admission_of(decision.entry, existing=True)
        policy = self.book.policy
        limits = effective_limits(policy.limits, request.session_limits, request.limits)
        now = workflow.now()
        evicted = [self.book.entries[helper_id] for helper_id in decision.evict]
        entry = apply_admission(self.book, request, decision, now, limits.hard_ceiling_ms)
        granted = grant_slots(self.book, now)
        starts_now = request.helper_id in granted
        try:
            if evicted:
                await workflow.execute_local_activity_method(
                    RowActivities.remove_rows,
                    self._removal([entry for entry in evicted]),
                    **options.ADMISSION_WRITE,
                )
            await workflow.execute_local_activity_method(
                AdmissionActivities.admit_helper,
                AdmitHelper(
                    row=NewRow(request=request, seq=entry.seq, limits=limits, admitted_at=now),
                    start=HelperStart(
                        owner=request.owner,
                        helper_id=request.helper_id,
                        seq=entry.seq,
                        goal_id=request.goal_id,
                        language=request.language,
                        model=request.model,
                        limits=limits,
                        slot_granted=starts_now,
                        summary_max=policy.summary_max,
                        check_ms=policy.check_ms,
                        follow=policy.follow,
                        title=_title(request.task),
                    ),
                ),
                **options.ADMISSION_WRITE,
            )
        except ActivityError as error:
            workflow.logger.error("admission of %s/%s failed: %s", request.owner, request.helper_id, error)
            # The row may exist without its workflow: take it away again, so nothing half-admitted stays.
            with contextlib.suppress(ActivityError):
                await workflow.execute_local_activity_method(
                    RowActivities.remove_rows, self._removal([entry]), **options.ADMISSION_WRITE
                )
            undo_admission(self.book, request.helper_id)
            for old in evicted:
                self.book.entries.setdefault(old.helper_id, old)
            await self._hand_out_slots()
            raise ApplicationError(
                f"helper {request.helper_id} was not admitted: the store or the server did not answer; try again",
                type="AdmissionFailed",
                non_retryable=True,
            ) from None
        # Helpers queued before this one take the slots they were just given (the new one has its own
        # in its start input).
        await self._signal_granted([helper_id for helper_id in granted if helper_id != request.helper_id])
        workflow.logger.info(
            "admitted %s/%s (%s, %s ahead)", request.owner, request.helper_id, entry.state.value, decision.ahead
        )
        return Admission(
            owner=request.owner,
            helper_id=request.helper_id,
            status=AdmissionStatus.RUNNING if starts_now else AdmissionStatus.WAITING,
            ahead=0 if starts_now else decision.ahead,
            evicted=decision.evict,
        )

    @admit.validator
    def _validate_admit(self, request: HelperRequest) -> None:
        # Rejected here, the request leaves no trace in the history and writes nothing (R5).
        self._refuse_while_stopping()
        if request.owner != self.book.owner:
            raise refused(Refusal(code=RefusalCode.WRONG_OWNER, message=f"this coordinator serves {self.book.owner}"))
        try:
            request.check_against(self.book.policy.limits)
        except RequestError as error:
            raise refused(Refusal(code=RefusalCode.INVALID_REQUEST, message=str(error))) from None
        decision = decide_admission(self.book, request)
        if isinstance(decision, Refusal):
            raise refused(decision)

    def _refuse_while_stopping(self) -> None:
        """While this run drains its handlers to continue as new, new updates are turned away (the starter
        asks again in a moment and reaches the next run); otherwise a steady stream of updates could keep
        the handlers busy forever and the run would never end."""
        if self.stopping:
            raise ApplicationError("the coordinator is continuing as new; ask again", type=BUSY)

    def _admission_of(self, entry: Entry, *, existing: bool) -> Admission:
        ahead = self.book.queue.index(entry.helper_id) if entry.helper_id in self.book.queue else 0
        status: AdmissionStatus | RowState = entry.state
        if entry.state is RowState.WAITING:
            status = AdmissionStatus.WAITING
        elif entry.state is RowState.RUNNING:
            status = AdmissionStatus.RUNNING
        return Admission(
            owner=self.book.owner, helper_id=entry.helper_id, status=status, ahead=ahead, existing=existing
        )

    # --- slots (R6-R8) -------------------------------------------------------------------------------

    async def _hand_out_slots(self) -> None:
        """Pass every free slot to the next waiting helper at once, by signal (R8)."""
        await self._signal_granted(grant_slots(self.book, workflow.now()))

    async def _signal_granted(self, helper_ids: list[str]) -> None:
        gone = False
        for helper_id in helper_ids:
            handle = workflow.get_external_workflow_handle(helper_workflow_id(self.book.owner, helper_id))
            try:
                await handle.signal(HelperWorkflow.slot_granted)
            except ApplicationError as error:
                # Only an operator can remove a helper workflow; its row is left for them to read.
                workflow.logger.error(
                    "helper %s/%s is gone (%s); its slot passes on", self.book.owner, helper_id, error
                )
                forget_gone_helper(self.book, helper_id, workflow.now())
                gone = True
        if gone:
            await self._hand_out_slots()

    @workflow.signal(name=HELPER_FINISHED)
    async def helper_finished(self, notice: FinishedNotice) -> None:
        self.messages_this_run += 1
        entry = apply_finished(self.book, notice)
        if entry is not None:
            workflow.logger.info("%s/%s finished: %s", self.book.owner, notice.helper_id, notice.kind.value)
        await self._hand_out_slots()

    @workflow.signal(name=HELPER_CLOSED)
    def helper_closed(self, helper_id: str) -> None:
        """A running helper closed its row; it keeps its slot until the core confirms the stop (R7, R21)."""
        self.messages_this_run += 1
        entry = self.book.entries.get(helper_id)
        if entry is not None and entry.helper_writes:
            entry.state = RowState.CLOSED

    # --- close (R21-R23) -------------------------------------------------------------------------------

    @workflow.update
    async def close(self, helper_id: str) -> CloseAnswer:
        self.messages_this_run += 1
        action = decide_close(self.book, helper_id)
        if isinstance(action, Refusal):
            raise refused(action)
        if action is CloseAction.ALREADY_REMOVED:
            return CloseAnswer(
                owner=self.book.owner, helper_id=helper_id, state=RowState.CLOSED, removed=True, already_closed=True
            )
        was_closed = self.book.entries[helper_id].state is RowState.CLOSED
        if action is CloseAction.FORWARD_TO_HELPER:
            entry = self.book.entries[helper_id]
            if not entry.close_requested:
                entry.close_requested = True
                handle = workflow.get_external_workflow_handle(helper_workflow_id(self.book.owner, helper_id))
                await handle.signal(HelperWorkflow.close)
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: entry.state is RowState.CLOSED or not entry.helper_writes,
                    timeout=CLOSE_ACK_WAIT,
                    timeout_summary="wait for the helper to close its row",
                )
            action = decide_close(self.book, helper_id) if not entry.helper_writes else CloseAction.NOTHING
            if isinstance(action, Refusal):
                raise refused(action)
        entry_or_none = self.book.entries.get(helper_id)
        if action is CloseAction.WRITE_CLOSED and entry_or_none is not None:
            entry = apply_closed_by_coordinator(self.book, helper_id)
            await workflow.execute_local_activity_method(
                RowActivities.coordinator_write,
                CoordinatorWrite(row=self._row_key(entry), state=RowState.CLOSED, keep_until=entry.keep_until),
                **options.STORE_WRITE,
            )
        elif action is CloseAction.REMOVE:
            await self._remove_rows([self.book.entries[helper_id]])
            return CloseAnswer(owner=self.book.owner, helper_id=helper_id, state=RowState.CLOSED, removed=True)
        entry_or_none = self.book.entries.get(helper_id)
        if entry_or_none is None:
            return CloseAnswer(owner=self.book.owner, helper_id=helper_id, state=RowState.CLOSED, removed=True)
        return CloseAnswer(
            owner=self.book.owner,
            helper_id=helper_id,
            state=entry_or_none.state,
            slot_held=entry_or_none.holds_slot,
            already_closed=was_closed,
        )

    @close.validator
    def _validate_close(self, helper_id: str) -> None:
        self._refuse_while_stopping()
        action = decide_close(self.book, helper_id)
        if isinstance(action, Refusal):
            raise refused(action)

    # --- reading and delivery (R26-R28) ------------------------------------------------------------

    @workflow.update
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

    @workflow.update
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
            raise ApplicationError("nothing is delivered: the turn sent no answer", type=REFUSED, non_retryable=True)

    async def _outbox(self) -> None:
        """Offer one system event when the chat is idle; back off while it is busy or down (R26)."""
        backoff = OFFER_BACKOFF_FIRST
        while not self.stopping:
            await workflow.wait_condition(lambda: self.stopping or self._event_due())
            if self.stopping:
                return
            event = next_event(self.book)
            if event is None:
                continue
            language = self._language_of(event.helper_ids)
            event.state = EventState.ATTEMPTING
            first_offered_at = event.first_offered_at = event.first_offered_at or workflow.now()
            result = await workflow.execute_activity_method(
                ChatActivities.offer_chat_event,
                OfferEvent(
                    owner=self.book.owner,
                    key=event.key,
                    helper_ids=event.helper_ids,
                    language=language,
                    attempts=event.attempts,
                ),
                **options.CHAT_OFFER,
            )
            event.attempts += 1
            if result.state is EventState.DELIVERED and result.receipt_id:
                apply_event_delivered(self.book, result.receipt_id)
                backoff = OFFER_BACKOFF_FIRST
                continue
            event.state = result.state
            event.last_error = result.error
            if workflow.now() - first_offered_at >= OFFER_GIVE_UP:
                workflow.logger.warning("giving up system event %s after %s attempts", event.key, event.attempts)
                abandon_event(self.book)
                backoff = OFFER_BACKOFF_FIRST
                continue
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: self.stopping, timeout=backoff, timeout_summary="chat busy or down"
                )
            backoff = min(backoff * 2, OFFER_BACKOFF_MAX)

    def _event_due(self) -> bool:
        event = self.book.event
        if event is not None and event.state is not EventState.DELIVERED:
            return bool(event.helper_ids)
        return bool(unannounced(self.book))

    def _language_of(self, helper_ids: list[str]) -> str:
        for helper_id in helper_ids:
            entry = self.book.entries.get(helper_id)
            if entry is not None:
                return entry.language
        return "en"

    # --- retention (R29) -----------------------------------------------------------------------------

    async def _remove_rows(self, entries: list[Entry]) -> None:
        removed = await workflow.execute_local_activity_method(
            RowActivities.remove_rows, self._removal(entries), **options.STORE_WRITE
        )
        if removed.directories_left:
            workflow.logger.warning("result directories left for the sweep: %s", removed.directories_left)
        remove_entries(self.book, removed.removed)

    def _removal(self, entries: list[Entry]) -> RemoveRows:
        return RemoveRows(owner=self.book.owner, rows=[RowToRemove(helper_id=e.helper_id, seq=e.seq) for e in entries])

    # --- queries ------------------------------------------------------------------------------------

    @workflow.query
    def owner_book(self) -> OwnerBook:
        return self.book

    @workflow.query
    def counts(self) -> dict[str, int]:
        summary = summarize_book(self.book)
        return {
            "open": summary.open,
            "running": summary.running,
            "waiting": summary.waiting,
            "rows": summary.rows,
            "unreported": summary.unreported,
        }

    def _row_key(self, entry: Entry) -> RowKey:
        return RowKey(owner=self.book.owner, helper_id=entry.helper_id, seq=entry.seq, generation=entry.generation)


def _title(task: str) -> str:
    first = task.strip().splitlines()[0] if task.strip() else ""
    return first[:80] + ("…" if len(first) > 80 else "")
