"""The coordinator workflow: one per owner. It admits helpers, lends running slots, keeps the rows, tells the chat.

Iva reaches it by update-with-start (`admit`), so the first request of an owner starts it. Every decision is a
pure function of `domain.book`; handlers decide synchronously (no await before the decision), so concurrent
handlers never see a half-changed book. Admission answers at once: a helper that must wait gets its slot later
by signal, never by a blocked update (the server allows only 10 updates in flight per workflow).

It continues as new, carrying the book, long before the history or the per-run update limit is reached, and when
a new build becomes the deployment's current version: the run is PINNED to its build, and the next run starts
on the current one (Worker Versioning; docs/operations.md, "Releases").
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime, timedelta
from functools import partial

from temporalio import workflow
from temporalio.common import RawValue, VersioningBehavior
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.admission import AdmissionActivities
    from activities.chat import ChatActivities
    from activities.rows import RowActivities
    from domain.audit import WaitEnd, WaitEndKind
    from domain.book import admission, answering, audit, closing, delivery, outbox, retention, slots, waits, writes
    from domain.book.state import (
        AwaitEarlier,
        ChatEventRecord,
        Entry,
        EventState,
        Judgement,
        OwnerBook,
        Refusal,
        still_working,
        summarize_book,
    )
    from domain.limits import effective_limits
    from domain.messages import activities, updates
    from domain.messages.signals import FinishedNotice
    from domain.messages.workflows import CoordinatorStart
    from domain.requests import HelperRequest
    from domain.rows import RowState
    from protocol import names
    from protocol.deadlines import too_late
    from protocol.errors import ErrorType
    from protocol.signal_senders import ask_to_close, grant_slot
    from workflows import options
    from workflows.failures import CALL_FAILED, cause_of, failed_for_good
    from workflows.start_input import read_start

# Continue as new well before the server's 2,000 updates per run and its history warnings, and while a replay of
# the run (after a worker restart) is still quick.
MAX_MESSAGES_PER_RUN = 500
MAX_EVENTS_PER_RUN = 2_500
# A coordinator with nothing due still wakes this often, so that it notices a new current build and moves to it:
# the old build's workers can stop once every run pinned to it has ended.
IDLE_WAKEUP = timedelta(hours=1)
# The server turns back a task that closes the run if a signal arrived meanwhile, and with it every update that
# task accepted: a short timer commits the last handlers' task first, and the next task continues as new.
CONTINUE_AS_NEW_SETTLE = timedelta(milliseconds=10)
# How long a close waits for a running helper to close its row (it answers within one workflow task).
CLOSE_ACK_WAIT = timedelta(seconds=30)
# The row can show an outcome a moment before the helper's finished notice reaches the book: a read or a
# follow-up of that outcome waits this long for the notice.
READ_WAIT = timedelta(seconds=10)
EARLIER_OUTCOME_WAIT = timedelta(seconds=5)


@workflow.defn(name=names.COORDINATOR_WORKFLOW, versioning_behavior=VersioningBehavior.PINNED)
class CoordinatorWorkflow:
    @workflow.init
    def __init__(self, start: RawValue) -> None:
        begun = read_start(start, CoordinatorStart)
        # A start that cannot be read leaves an empty book: every update is turned away, and the run ends at once.
        self.unreadable_start = begun if isinstance(begun, ApplicationError) else None
        if isinstance(begun, ApplicationError):
            begun = CoordinatorStart(owner=names.owner_of_coordinator(workflow.info().workflow_id))
        self.book = begun.book or OwnerBook(owner=begun.owner, policy=begun.policy)
        self.messages_this_run = 0
        self.stopping = False  # draining handlers to continue as new: new updates are turned away
        self.armed_wakeup = self._next_wakeup()
        # Helpers whose admission is decided but whose row and workflow are still being written: a slot they are
        # given meanwhile stays theirs and is signalled once the write is done (there is no workflow yet).
        self.writing: set[str] = set()
        # The chat said it turned idle since the outbox's last offer began: the backoff ends at once.
        self.chat_turned_idle = False

    # --- the run: one timer for retention and leases, the outbox, continue-as-new -----------------

    @workflow.run
    async def run(self, start: RawValue) -> None:
        if self.unreadable_start is not None:
            raise self.unreadable_start
        offering = asyncio.ensure_future(self._outbox())
        while not self._should_continue_as_new():
            self.armed_wakeup = self._next_wakeup()
            timeout = IDLE_WAKEUP
            if self.armed_wakeup is not None:
                timeout = min(max(self.armed_wakeup - workflow.now(), timedelta(seconds=1)), IDLE_WAKEUP)
            try:
                await workflow.wait_condition(
                    lambda: self._should_continue_as_new() or self._timer_outdated(),
                    timeout=timeout,
                    timeout_summary="next row expiry, slot lease end, reminder, wait expiry or build check",
                )
            except TimeoutError:
                await self._expire()
        self.stopping = True
        await offering
        await workflow.wait_condition(workflow.all_handlers_finished)
        await workflow.sleep(CONTINUE_AS_NEW_SETTLE, summary="commit the last handlers before continuing as new")
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(
            CoordinatorStart(owner=self.book.owner, policy=self.book.policy, book=self.book),
            # The next run starts on the deployment's current build, and stays on it.
            initial_versioning_behavior=workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE,
        )

    def _next_wakeup(self) -> datetime | None:
        """The one timer's moment: the next row expiry or lease end (retention), reminder or wait expiry (waits)."""
        moments = [moment for moment in (retention.next_wakeup(self.book), waits.next_moment(self.book)) if moment]
        return min(moments, default=None)

    def _timer_outdated(self) -> bool:
        return retention.timer_outdated(self._next_wakeup(), self.armed_wakeup)

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.is_target_worker_deployment_version_changed()
            or self.messages_this_run >= MAX_MESSAGES_PER_RUN
            or info.get_current_history_length() >= MAX_EVENTS_PER_RUN
        )

    async def _expire(self) -> None:
        now = workflow.now()
        for helper_id in slots.expire_leases(self.book, now):
            workflow.logger.warning("slot lease of %s/%s ended without its notice", self.book.owner, helper_id)
        await self._hand_out_slots()
        for entry in waits.come_due(self.book, now).expired:
            workflow.logger.info("%s/%s: its wait expired unanswered", self.book.owner, entry.helper_id)
            await self._write_row(
                entry, RowState.EXPIRED, audit.end_of(entry, WaitEndKind.EXPIRED, entry.expired_at or now)
            )
        expired = retention.expired(self.book, now)
        if expired:
            await self._remove_rows([self.book.entries[helper_id] for helper_id in expired])

    def _refuse_late_or_draining(self) -> None:
        """Every validator's first checks. An update that arrives after its accept-by time is turned away: its
        caller has been told that nothing was taken (protocol.deadlines). While this run drains its handlers to
        continue as new, new updates are turned away too (the starter asks again in a moment and reaches the next
        run); a steady stream of updates could otherwise keep the handlers busy for ever and the run would never
        end."""
        update = workflow.current_update_info()
        if update is not None and too_late(update.id, workflow.now()):
            raise ApplicationError(
                "the request reached the coordinator after its accept-by time; nothing was taken",
                type=ErrorType.TOO_LATE,
                non_retryable=True,
            )
        if self.stopping:
            raise ApplicationError("the coordinator is continuing as new; ask again", type=ErrorType.COORDINATOR_BUSY)
        if self.unreadable_start is not None:
            # Another client's request started this run and could not be read; the next run takes this one.
            raise ApplicationError("the coordinator is ending; ask again", type=ErrorType.COORDINATOR_BUSY)

    # --- admission (R1-R5) --------------------------------------------------------------------------

    @workflow.update(name=names.ADMIT)
    async def admit(self, request: HelperRequest) -> updates.Admission:
        self.messages_this_run += 1
        waited = False
        while True:
            decision = admission.judge(self.book, request, waited=waited)
            if isinstance(decision, Refusal):
                raise refused(decision)
            if not isinstance(decision, AwaitEarlier):
                break
            # Iva may have read the earlier outcome already: a follow-up of a visible outcome is not refused as
            # "still working".
            await self._await_finished(request.follow_up or "")
            waited = True
        if isinstance(decision, admission.AlreadyAdmitted):
            return self._admission_of(decision.entry, existing=True)
        return await self._admit_decided(request, decision)

    async def _await_finished(self, helper_id: str) -> None:
        """Wait (bounded) for the finished notice of a helper whose outcome the row may show already."""
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(
                lambda: not still_working(self.book, helper_id),
                timeout=EARLIER_OUTCOME_WAIT,
                timeout_summary="wait for the helper's finished notice",
            )

    async def _admit_decided(
        self, request: HelperRequest, decision: admission.Admit, ended: WaitEnd | None = None
    ) -> updates.Admission:
        """Carry out an admission decided in this task: the book first, then the row and the workflow. `ended`: the
        wait of the earlier row that an answer ends; a follow-up started by hand ends it too."""
        policy = self.book.policy
        limits = effective_limits(policy.limits, request.session_limits, request.limits)
        now = workflow.now()
        evicted = [self.book.entries[helper_id] for helper_id in decision.evict]
        earlier = self.book.entries.get(request.follow_up) if request.follow_up else None
        earlier_before = earlier.model_copy(deep=True) if earlier is not None else None
        if ended is None and earlier is not None:
            ended = audit.ended_if_waiting(earlier, WaitEndKind.FOLLOWED_UP, now, follow_up=request.helper_id)
        entry = admission.take(self.book, request, decision, now, limits.hard_ceiling_ms)
        granted = slots.grant(self.book, now)
        admitting = activities.AdmitHelper(
            row=writes.new_row(self.book, request, entry, limits, now, ended),
            start=writes.helper_start(
                policy, request, seq=entry.seq, limits=limits, slot_granted=request.helper_id in granted
            ),
            evict=writes.rows_to_remove(self.book.owner, evicted, now) if evicted else None,
        )
        # The decision is committed with this task before the row is written and the helper started: the write is
        # an activity scheduled in the task that accepts the update, so a worker killed during the write leaves a
        # decision that the retried write carries out (idempotently), and no later admission can take its seq or
        # its slot.
        self.writing.add(request.helper_id)
        try:
            await workflow.execute_activity_method(
                AdmissionActivities.admit_helper,
                admitting,
                summary=f"admit {request.helper_id}: remove {len(evicted)} rows for room, write its row, start it",
                **options.ADMISSION_WRITE,
            )
        except CALL_FAILED as error:
            workflow.logger.error("admission of %s/%s failed: %s", request.owner, request.helper_id, error)
            # The row may exist without its workflow: take it away again, so nothing half-admitted stays.
            with contextlib.suppress(*CALL_FAILED):
                await workflow.execute_local_activity_method(
                    RowActivities.remove_rows,
                    writes.rows_to_remove(self.book.owner, [entry], now),
                    **options.ADMISSION_WRITE,
                )
            admission.undo(self.book, request.helper_id, evicted, earlier_before)
            await self._hand_out_slots()
            why = cause_of(error) if failed_for_good(error) else "the store or the server did not answer; try again"
            raise ApplicationError(
                f"helper {request.helper_id} was not admitted: {why}",
                type=ErrorType.ADMISSION_FAILED,
                non_retryable=True,
            ) from None
        finally:
            self.writing.discard(request.helper_id)
        # Helpers queued before this one take the slots they were just given; this one has its slot in its start
        # input, or was given one while its row and workflow were written.
        to_signal = [helper_id for helper_id in granted if helper_id != request.helper_id]
        if entry.holds_slot and request.helper_id not in granted:
            to_signal.append(request.helper_id)
        await self._signal_granted(to_signal)
        early = slots.take_early_notice(self.book, request.helper_id, entry.seq)
        if early is not None:
            # Replayed after a crash, this admission's helper had already finished: its notice counts now.
            workflow.logger.warning("%s/%s finished before its admission was recorded", request.owner, entry.helper_id)
            slots.finished(self.book, early)
            await self._hand_out_slots()
            return self._admission_of(entry, existing=False)
        workflow.logger.info(
            "admitted %s/%s (%s, %s ahead)", request.owner, request.helper_id, entry.state.value, decision.ahead
        )
        # Where the helper is now: a slot may have come to it while its row and workflow were written (and a quick
        # helper may even have ended; it ran, so it is answered as running).
        waiting = request.helper_id in self.book.queue
        return updates.Admission(
            owner=request.owner,
            helper_id=request.helper_id,
            status=RowState.WAITING if waiting else RowState.RUNNING,
            ahead=self.book.queue.index(request.helper_id) if waiting else 0,
            evicted=decision.evict,
        )

    @admit.validator
    def _validate_admit(self, request: HelperRequest) -> None:
        # Rejected here, the request leaves no trace in the history and writes nothing (R5).
        self._refuse_late_or_draining()
        refuse_if_refused(admission.judge(self.book, request))

    def _admission_of(self, entry: Entry, *, existing: bool) -> updates.Admission:
        ahead = self.book.queue.index(entry.helper_id) if entry.helper_id in self.book.queue else 0
        return updates.Admission(
            owner=self.book.owner, helper_id=entry.helper_id, status=entry.state, ahead=ahead, existing=existing
        )

    # --- answers to questions and authorization waits (R49) ---------------------------------------------
    # The first valid answer is recorded in the book before anything is awaited, so of two answers handled in one
    # task the second already finds it; its follow-up is admitted in the same task, by the admission rules.

    @workflow.update(name=names.ANSWER)
    async def answer(self, request: updates.AnswerRequest) -> updates.AnswerResult:
        self.messages_this_run += 1
        arrived_at = workflow.now()
        waited = False
        while True:
            judged = answering.judge(
                self.book,
                request.owner,
                request.helper_id,
                request.answer,
                arrived_at=arrived_at,
                waited=waited,
                decider=request.decider,
            )
            if isinstance(judged, Refusal):
                raise refused(judged)
            if isinstance(judged, AwaitEarlier):
                await self._await_finished(request.helper_id)
                waited = True
                continue
            if isinstance(judged, answering.TakeAnswer):
                return await self._take_answer(request, judged)
            follow_up_id = judged.entry.followed_up_by
            if follow_up_id is None or follow_up_id not in self.writing:
                return self._answer_of(request, judged.entry, repeated=True, same=judged.same)
            # The first answer's follow-up is still being written: answer once it is taken (or withdrawn).
            await workflow.wait_condition(partial(self._written, follow_up_id))

    def _written(self, helper_id: str) -> bool:
        return helper_id not in self.writing

    async def _take_answer(self, request: updates.AnswerRequest, judged: answering.TakeAnswer) -> updates.AnswerResult:
        """Record a first valid answer and admit its follow-up, or, for `deny`, deliver the outcome. An answer whose
        follow-up fails to be admitted is withdrawn: the owner can answer again."""
        entry = answering.record(self.book, request.helper_id, request.answer)
        now = workflow.now()
        if judged.follow_up is None or judged.admission is None:
            answering.deny(self.book, entry, now)
            # Written also when the row was delivered already: the write carries the wait's record.
            await self._write_row(entry, RowState.DELIVERED, audit.answered(entry, now, request.decider, None))
            return self._answer_of(request, entry)
        ended = audit.answered(entry, now, request.decider, judged.follow_up.helper_id)
        try:
            admitted = await self._admit_decided(judged.follow_up, judged.admission, ended)
        except ApplicationError:
            answering.withdraw(self.book, request.helper_id)
            raise
        return self._answer_of(request, entry, follow_up=admitted)

    @answer.validator
    def _validate_answer(self, request: updates.AnswerRequest) -> None:
        # Rejected here, the answer leaves no trace in the history and writes nothing.
        self._refuse_late_or_draining()
        refuse_if_refused(
            answering.judge(
                self.book,
                request.owner,
                request.helper_id,
                request.answer,
                arrived_at=workflow.now(),
                decider=request.decider,
            )
        )

    def _answer_of(
        self,
        request: updates.AnswerRequest,
        entry: Entry,
        *,
        repeated: bool = False,
        same: bool = True,
        follow_up: updates.Admission | None = None,
    ) -> updates.AnswerResult:
        """The recorded answer, with the follow-up it started: as its admission answered (with the rows it evicted),
        or as it is now for a repeated answer. The entry is the one answered: a close while the follow-up was being
        admitted may have removed it from the book since."""
        answer = entry.answer or request.answer
        if follow_up is None and entry.followed_up_by is not None and entry.followed_up_by in self.book.entries:
            follow_up = self._admission_of(self.book.entries[entry.followed_up_by], existing=repeated)
        return updates.AnswerResult(
            owner=self.book.owner,
            helper_id=entry.helper_id,
            question_id=answer.question_id,
            option_id=answer.option_id,
            text=answer.text,
            repeated=repeated,
            same=same,
            follow_up=follow_up,
            asked=entry.asked.grant if entry.asked is not None else None,
            granted=answering.granted_item(entry.asked, answer) if entry.asked is not None else None,
        )

    # --- slots (R6-R8) -------------------------------------------------------------------------------

    @workflow.signal(name=names.HELPER_FINISHED)
    async def helper_finished(self, notice: FinishedNotice) -> None:
        self.messages_this_run += 1
        entry = slots.finished(self.book, notice)
        if entry is not None:
            holding = " (keeps its slot while it finds a lost session)" if entry.finding_lost_session else ""
            workflow.logger.info("%s/%s finished: %s%s", self.book.owner, notice.helper_id, notice.kind.value, holding)
        await self._hand_out_slots()

    @workflow.signal(name=names.HELPER_CLOSED)
    def helper_closed(self, helper_id: str) -> None:
        """A running helper closed its row; it keeps its slot until the core confirms the stop (R7, R21)."""
        self.messages_this_run += 1
        slots.closed_by_helper(self.book, helper_id)

    async def _hand_out_slots(self) -> None:
        """Pass every free slot to the next waiting helper at once, by signal (R8)."""
        await self._signal_granted(slots.grant(self.book, workflow.now()))

    async def _signal_granted(self, helper_ids: list[str]) -> None:
        gone = False
        for helper_id in helper_ids:
            if helper_id in self.writing:
                continue
            try:
                await grant_slot(self.book.owner, helper_id)
            except ApplicationError as error:
                regranted = await self._regrant(helper_id)
                if regranted in (activities.Regranted.GRANTED, activities.Regranted.STARTED):
                    continue
                # Only an operator can remove a helper workflow; its row is left for them to read.
                workflow.logger.error(
                    "helper %s/%s is gone (%s); its slot passes on", self.book.owner, helper_id, error
                )
                entry = slots.forget_gone_helper(self.book, helper_id, workflow.now())
                if entry is not None and regranted is activities.Regranted.ENDED:
                    await self._close_ended_row(entry)
                gone = True
        if gone:
            await self._hand_out_slots()

    async def _regrant(self, helper_id: str) -> activities.Regranted | None:
        """The slot's signal found no workflow: an admission whose start was lost still has its row, from which the
        helper is started holding the slot; only a helper that really ended lets its slot pass on. None: the row
        could not be read."""
        entry = self.book.entries.get(helper_id)
        if entry is None:
            return None
        try:
            regranted = await workflow.execute_local_activity_method(
                AdmissionActivities.regrant_helper,
                activities.RegrantHelper(
                    owner=self.book.owner, helper_id=helper_id, seq=entry.seq, policy=self.book.policy
                ),
                **options.ADMISSION_WRITE,
            )
        except CALL_FAILED as error:
            workflow.logger.error("could not look for %s/%s: %s", self.book.owner, helper_id, error)
            return None
        if regranted is activities.Regranted.STARTED:
            workflow.logger.warning("%s/%s had no workflow: started from its row", self.book.owner, helper_id)
        return regranted

    async def _close_ended_row(self, entry: Entry) -> None:
        """A helper whose run ended without finalizing: its row would otherwise stay open for ever. A store that does
        not answer must not fail the handler (from a signal that would fail the coordinator): the row then waits
        for an operator."""
        try:
            await self._write_row(entry, RowState.CLOSED)
        except CALL_FAILED as error:
            workflow.logger.error("could not close the row of %s: %s", entry.helper_id, error)

    # --- close (R21-R23) -------------------------------------------------------------------------------

    @workflow.update(name=names.CLOSE_HELPER)
    async def close(self, helper_id: str) -> updates.CloseAnswer:
        self.messages_this_run += 1
        # A helper whose admission is still writing has no row or workflow to close yet; the wait is bounded by the
        # admission's own writes (options.ADMISSION_WRITE).
        await workflow.wait_condition(lambda: helper_id not in self.writing)
        waiting = self.book.entries.get(helper_id)
        if waiting is not None and waits.past_bound(waiting, workflow.now()):
            await self._expire()  # its wait ended at the bound: the close finds it expired, as an answer would
        action = closing.judge(self.book, helper_id)
        if isinstance(action, Refusal):
            raise refused(action)
        if action is closing.CloseAction.ALREADY_REMOVED:
            return updates.CloseAnswer(
                owner=self.book.owner, helper_id=helper_id, state=RowState.CLOSED, removed=True, already_closed=True
            )
        was_closed = self.book.entries[helper_id].state is RowState.CLOSED
        if action is closing.CloseAction.FORWARD_TO_HELPER:
            entry = self.book.entries[helper_id]
            if closing.request(self.book, helper_id):
                await ask_to_close(self.book.owner, helper_id)
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: entry.state is RowState.CLOSED or not entry.helper_writes,
                    timeout=CLOSE_ACK_WAIT,
                    timeout_summary="wait for the helper to close its row",
                )
            action = closing.decide(self.book, helper_id) if not entry.helper_writes else closing.CloseAction.NOTHING
            if isinstance(action, Refusal):
                raise refused(action)
        if action is closing.CloseAction.WRITE_CLOSED and helper_id in self.book.entries:
            ended = audit.ended_if_waiting(self.book.entries[helper_id], WaitEndKind.CLOSED, workflow.now())
            entry = closing.close_row(self.book, helper_id)
            await self._write_row(entry, RowState.CLOSED, ended)
        elif action is closing.CloseAction.REMOVE:
            await self._remove_rows([self.book.entries[helper_id]], closed_by_owner=True)
            return updates.CloseAnswer(owner=self.book.owner, helper_id=helper_id, state=RowState.CLOSED, removed=True)
        remaining = self.book.entries.get(helper_id)
        if remaining is None:
            return updates.CloseAnswer(owner=self.book.owner, helper_id=helper_id, state=RowState.CLOSED, removed=True)
        return updates.CloseAnswer(
            owner=self.book.owner,
            helper_id=helper_id,
            state=remaining.state,
            slot_held=remaining.holds_slot,
            already_closed=was_closed,
        )

    @close.validator
    def _validate_close(self, helper_id: str) -> None:
        self._refuse_late_or_draining()
        refuse_if_refused(closing.judge(self.book, helper_id))

    # --- reading and delivery (R26-R28) ----------------------------------------------------------------
    # A chat turn reads unreported outcomes (`mark_read`), answers, then reports the answer (`mark_delivered`):
    # only what that turn read becomes delivered.

    @workflow.update(name=names.MARK_READ)
    async def mark_read(self, request: updates.ReadRequest) -> updates.ReadAnswer:
        self.messages_this_run += 1
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(
                lambda: not delivery.finishing(self.book, request.helper_ids),
                timeout=READ_WAIT,
                timeout_summary="wait for finished notices",
            )
        refuse_if_refused(delivery.judge_read(self.book, request.owner, request.helper_ids))
        read = delivery.read(self.book, request.turn, request.helper_ids)
        return updates.ReadAnswer(owner=self.book.owner, turn=request.turn, read=read)

    @mark_read.validator
    def _validate_read(self, request: updates.ReadRequest) -> None:
        self._refuse_late_or_draining()
        refuse_if_refused(delivery.judge_read(self.book, request.owner, request.helper_ids, allow_finishing=True))

    @workflow.update(name=names.MARK_DELIVERED)
    async def mark_delivered(self, request: updates.DeliveredRequest) -> updates.DeliveredAnswer:
        """The turn that read these outcomes sent a nonempty answer and completed (R28)."""
        self.messages_this_run += 1
        delivered = delivery.deliver(self.book, request.turn, workflow.now())
        for entry in delivered:
            await self._write_row(entry, RowState.DELIVERED, wait=waits.schedule(self.book, entry))
        return updates.DeliveredAnswer(
            owner=self.book.owner, turn=request.turn, delivered=[e.helper_id for e in delivered]
        )

    @mark_delivered.validator
    def _validate_delivered(self, request: updates.DeliveredRequest) -> None:
        self._refuse_late_or_draining()
        refuse_if_refused(delivery.judge_delivered(self.book, request.owner, request.answer_chars))

    async def _outbox(self) -> None:
        """Offer one system event at a time while the chat is idle; back off while it is busy or down (R26). An
        event withdrawn meanwhile (none of its outcomes is unreported any more) is not offered again, and the
        store says so once no offer of it is under way, instead of keeping its last attempt's state for ever."""
        backoff = outbox.BACKOFF_FIRST
        while not self.stopping:
            # An offer starts only once the run loop has armed its timer for the book as it is now, so the two
            # coroutines' commands come in one order however the SDK groups events into activations.
            await workflow.wait_condition(
                lambda: (
                    self.stopping
                    or ((outbox.due(self.book) or bool(self.book.withdrawn)) and not self._timer_outdated())
                )
            )
            if self.stopping:
                return
            for key in outbox.take_withdrawn(self.book):
                await workflow.execute_local_activity_method(
                    ChatActivities.withdraw_chat_event,
                    activities.WithdrawnEvent(owner=self.book.owner, key=key),
                    **options.STORE_WRITE,
                )
            event = outbox.next_event(self.book)
            if event is None:
                continue
            outbox.start_offer(event, workflow.now())
            self.chat_turned_idle = False
            waits_for, about = outbox.waits_for(self.book, event)
            offer = activities.OfferEvent(
                owner=self.book.owner,
                key=event.key,
                helper_ids=event.helper_ids,
                language=outbox.language_of(self.book, event.helper_ids),
                attempts=event.attempts,
                kind=event.kind,
                waits_for=waits_for,
                about=about,
            )
            result = await self._offer(offer)
            outcome = outbox.record_offer(
                self.book, event, result.state, result.receipt_id, result.error, workflow.now(), outbox.OFFER_GIVE_UP
            )
            if outcome is not outbox.OfferOutcome.RETRY:
                if outcome is outbox.OfferOutcome.GIVEN_UP:
                    workflow.logger.warning("gave up system event %s after %s attempts", event.key, event.attempts)
                backoff = outbox.BACKOFF_FIRST
                continue

            # A withdrawn event ends the wait: it holds back no fresh outcome's event. So does the chat turning idle.
            def backoff_over(offered: ChatEventRecord = event) -> bool:
                return self.stopping or self.book.event is not offered or self.chat_turned_idle

            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(backoff_over, timeout=backoff, timeout_summary="chat busy or down")
            backoff = min(backoff * 2, outbox.BACKOFF_MAX)

    @workflow.signal(name=names.CHAT_IDLE)
    def chat_idle(self) -> None:
        """The owner's chat turned idle (it says so through the starter, only while an event waits for it): the
        waiting event is offered now, not after the rest of the backoff (R26)."""
        self.messages_this_run += 1
        self.chat_turned_idle = True

    async def _offer(self, offer: activities.OfferEvent) -> activities.OfferResult:
        """One offer, outside the coordinator's task, so the owner's next admission never waits for the chat. An
        offer that timed out or whose worker died is uncertain: the chat may have it, and a repeat with the same
        key is harmless."""
        try:
            return await workflow.execute_activity_method(ChatActivities.offer_chat_event, offer, **options.CHAT_OFFER)
        except ActivityError as error:
            workflow.logger.warning("offer of system event %s failed: %s", offer.key, error.cause or error)
            return activities.OfferResult(state=EventState.UNCERTAIN, error=str(error.cause or error))

    # --- rows (R29) -------------------------------------------------------------------------------------

    async def _write_row(
        self,
        entry: Entry,
        state: RowState,
        ended: WaitEnd | None = None,
        *,
        wait: activities.WaitSchedule | None = None,
    ) -> None:
        await workflow.execute_local_activity_method(
            RowActivities.coordinator_write,
            activities.CoordinatorWrite(
                row=writes.entry_row(self.book.owner, entry),
                state=state,
                delivered_at=entry.delivered_at if state is RowState.DELIVERED else None,
                keep_until=entry.keep_until,
                ended=ended,
                wait=wait,
            ),
            **options.STORE_WRITE,
        )

    async def _remove_rows(self, entries: list[Entry], *, closed_by_owner: bool = False) -> None:
        ended_as = WaitEndKind.CLOSED if closed_by_owner else WaitEndKind.REMOVED
        removal = writes.rows_to_remove(self.book.owner, entries, workflow.now(), ended_as)
        removed = await workflow.execute_local_activity_method(
            RowActivities.remove_rows, removal, **options.STORE_WRITE
        )
        if removed.directories_left:
            workflow.logger.warning("result directories left for the sweep: %s", removed.directories_left)
        if closed_by_owner:
            for entry in entries:
                closing.closed_for_removal(self.book, entry.helper_id)
        retention.forget(self.book, removed.removed)

    # --- queries ------------------------------------------------------------------------------------

    @workflow.query(name=names.OWNER_BOOK)
    def owner_book(self) -> OwnerBook:
        return self.book

    @workflow.query(name=names.COUNTS)
    def counts(self) -> dict[str, int]:
        summary = summarize_book(self.book)
        return {
            "open": summary.open,
            "running": summary.running,
            "waiting": summary.waiting,
            "rows": summary.rows,
            "unreported": summary.unreported,
        }


def refuse_if_refused(judged: Judgement[object]) -> None:
    """A validator's whole answer: the judgement's refusal is raised, and the request leaves no trace in the
    history; a verdict is for the handler to carry out."""
    if isinstance(judged, Refusal):
        raise refused(judged)


def refused(refusal: Refusal) -> ApplicationError:
    """A judgement's refusal, as its caller gets it."""
    return ApplicationError(
        refusal.message, refusal.model_dump(mode="json"), type=ErrorType.HELPER_REFUSED, non_retryable=True
    )
