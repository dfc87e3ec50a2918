"""The coordinator workflow: one per owner. It admits helpers, lends running slots, keeps the rows.

Iva reaches it by update-with-start (`admit`), so the first request of an owner starts it. Every
decision is a pure function of `domain.book`; handlers decide synchronously (no await before
the decision), so concurrent handlers never see a half-changed book. Admission answers at once: a
helper that must wait gets its slot later by signal, never by a blocked update (the server allows
only 10 updates in flight per workflow). It continues as new, carrying the book, long before the
history or the per-run update limit is reached.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.chat import ChatActivities
    from activities.rows import RowActivities
    from domain.activity_io import (
        AdmitHelper,
        CoordinatorWrite,
        RowKey,
        WithdrawnEvent,
        helper_start,
    )
    from domain.book import (
        AlreadyAdmitted,
        CloseAction,
        Entry,
        FinishedNotice,
        OwnerBook,
        Refusal,
        RefusalCode,
        apply_admission,
        apply_closed_by_coordinator,
        apply_closed_by_helper,
        apply_finished,
        decide_admission,
        decide_close,
        expire_leases,
        expired_rows,
        grant_slots,
        next_wakeup,
        remove_entries,
        request_close,
        summarize_book,
        take_early_notice,
        timer_outdated,
        undo_admission,
    )
    from domain.ids import check_id
    from domain.limits import effective_limits
    from domain.requests import HelperRequest, RequestError
    from domain.rows import Admission, CloseAnswer, RowState
    from protocol.errors import ErrorType
    from protocol.messages import (
        ADMIT,
        CLOSE_HELPER,
        COORDINATOR_WORKFLOW,
        COUNTS,
        HELPER_CLOSED,
        HELPER_FINISHED,
        OWNER_BOOK,
        CoordinatorStart,
    )
    from protocol.senders import ask_to_close
    from workflows import options
    from workflows.coordinator_admission import DECIDED_BEFORE_WRITTEN_PATCH, CoordinatorAdmission
    from workflows.coordinator_delivery import CoordinatorDelivery, refused
    from workflows.coordinator_follow_ups import CoordinatorFollowUps
    from workflows.coordinator_slots import CoordinatorSlots
    from workflows.failures import CALL_FAILED, cause_of, failed_for_good

# Coordinators recorded before this change replay without the withdrawn event's store write.
WITHDRAWN_EVENTS_PATCH = "record-withdrawn-events"
# Continue as new well before the server's 2,000 updates per run and its history warnings, and while a
# replay of the run (after a worker restart, or a completion the server turns back) is still quick.
MAX_MESSAGES_PER_RUN = 500
MAX_EVENTS_PER_RUN = 2_500
CLOSE_ACK_WAIT = timedelta(seconds=30)
# Continuing as new happens in a workflow task of its own, after the last handlers' task is committed.
OWN_TASK_FOR_CONTINUE_AS_NEW_PATCH = "continue-as-new-in-own-task"
CONTINUE_AS_NEW_SETTLE = timedelta(milliseconds=10)
# The run's timer is armed again only for an earlier moment (domain.book.timer_outdated); runs recorded
# before it re-arm whenever the moment changes.
TIMER_KEPT_WHEN_LATER_PATCH = "timer-kept-when-later"


@workflow.defn(name=COORDINATOR_WORKFLOW)
class CoordinatorWorkflow(CoordinatorAdmission, CoordinatorDelivery, CoordinatorFollowUps, CoordinatorSlots):
    @workflow.init
    def __init__(self, start: CoordinatorStart) -> None:
        self.book = start.book or OwnerBook(owner=start.owner, policy=start.policy)
        self.messages_this_run = 0
        self.stopping = False
        self.armed_wakeup = next_wakeup(self.book)
        self.timer_kept_when_later = False  # set first thing in `run`
        self.writing: set[str] = set()

    # --- the run loop: timers for retention and leases, the outbox, continue-as-new ---------------

    @workflow.run
    async def run(self, start: CoordinatorStart) -> None:
        self.timer_kept_when_later = workflow.patched(TIMER_KEPT_WHEN_LATER_PATCH)
        outbox = asyncio.ensure_future(self._outbox())
        while not self._should_continue_as_new():
            self.armed_wakeup = next_wakeup(self.book)
            timeout = None
            if self.armed_wakeup is not None:
                timeout = max(self.armed_wakeup - workflow.now(), timedelta(seconds=1))
            try:
                await workflow.wait_condition(
                    lambda: self._should_continue_as_new() or self._timer_outdated(),
                    timeout=timeout,
                    timeout_summary="next row expiry or slot lease end",
                )
            except TimeoutError:
                await self._expire()
        self.stopping = True
        await outbox
        await workflow.wait_condition(workflow.all_handlers_finished)
        if workflow.patched(OWN_TASK_FOR_CONTINUE_AS_NEW_PATCH):
            # The server turns back a task that closes the run if a signal arrived meanwhile (UnhandledCommand),
            # and with it every update that task accepted, although their local activities already wrote the
            # row and started the helper: the admission would be lost while its helper runs
            # (bench/one_owner.py met it every few thousand helpers). A timer commits the handlers' task first;
            # the task that continues as new then accepts no update (they are refused while stopping).
            await workflow.sleep(CONTINUE_AS_NEW_SETTLE, summary="commit the last handlers before continuing as new")
            await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(CoordinatorStart(owner=self.book.owner, policy=self.book.policy, book=self.book))

    def _timer_outdated(self) -> bool:
        if self.timer_kept_when_later:
            return timer_outdated(next_wakeup(self.book), self.armed_wakeup)
        return next_wakeup(self.book) != self.armed_wakeup  # as runs recorded before the patch

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or self.messages_this_run >= MAX_MESSAGES_PER_RUN
            or info.get_current_history_length() >= MAX_EVENTS_PER_RUN
        )

    async def _expire(self) -> None:
        now = workflow.now()
        for helper_id in expire_leases(self.book, now):
            workflow.logger.warning("slot lease of %s/%s ended without its notice", self.book.owner, helper_id)
        await self._hand_out_slots()
        expired = expired_rows(self.book, now)
        if expired:
            await self._remove_rows([self.book.entries[helper_id] for helper_id in expired])

    # --- admission (R1-R5) --------------------------------------------------------------------------

    @workflow.update(name=ADMIT)
    async def admit(self, request: HelperRequest) -> Admission:
        self.messages_this_run += 1
        if request.follow_up is not None:
            await self._earlier_outcome(request.follow_up)
        decision = decide_admission(self.book, request)
        if isinstance(decision, Refusal):
            raise refused(decision)
        if isinstance(decision, AlreadyAdmitted):
            return self._admission_of(decision.entry, existing=True)
        policy = self.book.policy
        limits = effective_limits(policy.limits, request.session_limits, request.limits)
        now = workflow.now()
        evicted = [self.book.entries[helper_id] for helper_id in decision.evict]
        earlier_before = self._earlier_of(request)
        entry = apply_admission(self.book, request, decision, now, limits.hard_ceiling_ms)
        granted = grant_slots(self.book, now)
        starts_now = request.helper_id in granted
        admitting = AdmitHelper(
            row=self._new_row(request, entry, limits, now),
            start=helper_start(
                policy,
                owner=request.owner,
                helper_id=request.helper_id,
                seq=entry.seq,
                goal_id=request.goal_id,
                language=request.language,
                model=request.model,
                limits=limits,
                task=request.task,
                slot_granted=starts_now,
            ),
        )
        decided_first = workflow.patched(DECIDED_BEFORE_WRITTEN_PATCH)
        try:
            await self._write_admission(admitting, evicted, decided_first)
        except CALL_FAILED as error:
            workflow.logger.error("admission of %s/%s failed: %s", request.owner, request.helper_id, error)
            # The row may exist without its workflow: take it away again, so nothing half-admitted stays.
            with contextlib.suppress(*CALL_FAILED):
                await workflow.execute_local_activity_method(
                    RowActivities.remove_rows, self._removal([entry]), **options.ADMISSION_WRITE
                )
            undo_admission(self.book, request.helper_id, evicted, earlier_before)
            await self._hand_out_slots()
            why = cause_of(error) if failed_for_good(error) else "the store or the server did not answer; try again"
            raise ApplicationError(
                f"helper {request.helper_id} was not admitted: {why}",
                type=ErrorType.ADMISSION_FAILED,
                non_retryable=True,
            ) from None
        # Helpers queued before this one take the slots they were just given (the new one has its own
        # in its start input).
        to_signal = [helper_id for helper_id in granted if helper_id != request.helper_id]
        if decided_first and entry.holds_slot and not starts_now:
            to_signal.append(request.helper_id)  # given while its row and workflow were being written
        await self._signal_granted(to_signal)
        early = take_early_notice(self.book, request.helper_id, entry.seq)
        if early is not None:
            # Replayed after a crash, this admission's helper had already finished: its notice counts now.
            workflow.logger.warning("%s/%s finished before its admission was recorded", request.owner, entry.helper_id)
            apply_finished(self.book, early)
            await self._hand_out_slots()
            return self._admission_of(entry, existing=False)
        workflow.logger.info(
            "admitted %s/%s (%s, %s ahead)", request.owner, request.helper_id, entry.state.value, decision.ahead
        )
        if decided_first:
            # Where the helper is now: a slot may have come to it while its row and workflow were written (and a
            # quick helper may even have ended; it ran, so it is answered as running).
            waiting = request.helper_id in self.book.queue
            return Admission(
                owner=request.owner,
                helper_id=request.helper_id,
                status=RowState.WAITING if waiting else RowState.RUNNING,
                ahead=self.book.queue.index(request.helper_id) if waiting else 0,
                evicted=decision.evict,
            )
        return Admission(
            owner=request.owner,
            helper_id=request.helper_id,
            status=RowState.RUNNING if starts_now else RowState.WAITING,
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
        if request.follow_up is not None and self._still_working(request.follow_up):
            return  # the handler waits (bounded) for the earlier outcome, then decides
        decision = decide_admission(self.book, request)
        if isinstance(decision, Refusal):
            raise refused(decision)

    def _refuse_while_stopping(self) -> None:
        """While this run drains its handlers to continue as new, new updates are turned away (the starter
        asks again in a moment and reaches the next run); otherwise a steady stream of updates could keep
        the handlers busy forever and the run would never end."""
        if self.stopping:
            raise ApplicationError("the coordinator is continuing as new; ask again", type=ErrorType.COORDINATOR_BUSY)

    def _admission_of(self, entry: Entry, *, existing: bool) -> Admission:
        ahead = self.book.queue.index(entry.helper_id) if entry.helper_id in self.book.queue else 0
        return Admission(
            owner=self.book.owner, helper_id=entry.helper_id, status=entry.state, ahead=ahead, existing=existing
        )

    # --- slots (R6-R8) -------------------------------------------------------------------------------

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
        apply_closed_by_helper(self.book, helper_id)

    # --- close (R21-R23) -------------------------------------------------------------------------------

    @workflow.update(name=CLOSE_HELPER)
    async def close(self, helper_id: str) -> CloseAnswer:
        self.messages_this_run += 1
        # A helper whose admission is still writing has no row or workflow to close yet; the wait is bounded
        # by the admission's own writes (options.ADMISSION_WRITE).
        await workflow.wait_condition(lambda: helper_id not in self.writing)
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
            if request_close(self.book, helper_id):
                await ask_to_close(self.book.owner, helper_id)
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
            event_before = self.book.event
            entry = apply_closed_by_coordinator(self.book, helper_id)
            if event_before is not None and self.book.event is None and workflow.patched(WITHDRAWN_EVENTS_PATCH):
                # Its last offer's state would otherwise stay "failed" in the store for ever.
                await workflow.execute_local_activity_method(
                    ChatActivities.withdraw_chat_event,
                    WithdrawnEvent(owner=self.book.owner, key=event_before.key),
                    **options.STORE_WRITE,
                )
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
        try:
            check_id("helper id", helper_id)  # a raw client sends whatever it likes (R40)
        except ValueError as error:
            raise refused(Refusal(code=RefusalCode.INVALID_REQUEST, message=str(error))) from None
        action = decide_close(self.book, helper_id)
        if isinstance(action, Refusal):
            raise refused(action)

    # --- retention (R29) -----------------------------------------------------------------------------

    async def _remove_rows(self, entries: list[Entry]) -> None:
        removed = await workflow.execute_local_activity_method(
            RowActivities.remove_rows, self._removal(entries), **options.STORE_WRITE
        )
        if removed.directories_left:
            workflow.logger.warning("result directories left for the sweep: %s", removed.directories_left)
        remove_entries(self.book, removed.removed)

    # --- queries ------------------------------------------------------------------------------------

    @workflow.query(name=OWNER_BOOK)
    def owner_book(self) -> OwnerBook:
        return self.book

    @workflow.query(name=COUNTS)
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
