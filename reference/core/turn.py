"""One session's turn: an asyncio task that steps through the model under eve's ceilings (R14).

Before every call the engine decides whether the call is final: after finish-now, once cumulative
input (cached included) has reached the input ceiling, or when the call is the step ceiling's last
(the 80th call is already final). A final call gets no tools, and its answer becomes a partial outcome
that opens with the stop explained in the owner's language. Compaction is the model adapter's: it
only lowers the next prompt, the counters keep growing. Every change is written through to the store
before the next await, so the stored snapshot is always the live one. A turn that stops where it can be
continued (paused, or partial) stores its conversation with that write; a follow-up session's turn starts
from the conversation it continues (`reference.core.carried`), with counters of its own from zero.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Literal

from contracts.core_api import (
    Authorization,
    CancelAnswer,
    CreateSession,
    QuestionChoices,
    SessionOutcome,
    SessionStatus,
    Snapshot,
    StepUsage,
    StopReason,
)
from reference.core.carried import PAUSED_OR_PARTIAL, dump_conversation, follow_up_conversation, load_conversation
from reference.core.instructions import final_call_notice, system_instructions
from reference.core.latches import Latches
from reference.core.model import (
    AssistantTurn,
    Conversation,
    CoreNotice,
    ModelError,
    ModelReply,
    ModelRequest,
    ToolCall,
    ToolResult,
    Usage,
)
from reference.core.model_catalog import PreparedModel
from reference.core.store import SessionStore
from reference.core.texts import text
from reference.core.tools import (
    ASK_OWNER,
    REQUEST_AUTHORIZATION,
    TOOL_SPECS,
    AskOwnerArgs,
    RequestAuthorizationArgs,
    parse_arguments,
    run_world_tool,
)
from reference.core.world import OwnerWorld

logger = logging.getLogger(__name__)

# eve's ceilings for a background turn (TURN_MAX_STEPS.helper and the cumulative input ceiling);
# a request can only lower them.
TURN_MAX_STEPS_HELPER = 80
INPUT_CEILING_TOKENS = 4_000_000


def with_refusals(body: str, snapshot: Snapshot, language: str) -> str:
    """The outcome text with every refusal in it, whatever the model wrote (R33)."""
    missing = [refusal for refusal in snapshot.refusals if refusal not in body]
    if not missing:
        return body
    listed = "\n".join(f"- {refusal}" for refusal in missing)
    return f"{body}\n\n{text('outcome.refusals_heading', language)}\n{listed}"


def _with_last_message(opening: str, snapshot: Snapshot, language: str) -> str:
    if not snapshot.last_message:
        return opening
    return f"{opening}\n\n{text('outcome.last_message', language)}\n{snapshot.last_message}"


def _with_choices(body: str, choices: QuestionChoices | None, language: str) -> str:
    """The question's outcome text with its options, so an owner who only reads the text can answer too."""
    if choices is None:
        return body
    lines = [body]
    if choices.options:
        listed = "; ".join(option.label for option in choices.options)
        lines.append(text("outcome.question_options", language, options=listed))
    if choices.free_text:
        lines.append(text("outcome.question_free_text", language))
    return "\n".join(lines)


def end_session(
    snapshot: Snapshot,
    status: SessionStatus,
    body: str,
    language: str,
    stop_reason: StopReason | None = None,
) -> None:
    snapshot.status = status
    snapshot.outcome = SessionOutcome(
        kind=status, text=with_refusals(body, snapshot, language), stop_reason=stop_reason
    )


def cancel_now(snapshot: Snapshot, language: str) -> None:
    snapshot.cancel_requested = True
    end_session(
        snapshot,
        SessionStatus.CANCELLED,
        _with_last_message(text("outcome.cancelled", language), snapshot, language),
        language,
    )


def interrupt(snapshot: Snapshot, language: str) -> None:
    """The core restarted under this running turn: it ends interrupted and is never replayed (R24)."""
    end_session(
        snapshot,
        SessionStatus.INTERRUPTED,
        _with_last_message(text("outcome.interrupted", language), snapshot, language),
        language,
    )


class Turn:
    """The running turn of one session; the service keeps it while its task is alive."""

    def __init__(
        self,
        *,
        request: CreateSession,
        snapshot: Snapshot,
        prepared: PreparedModel,
        world: OwnerWorld,
        store: SessionStore,
        on_finished: Callable[[str], None],
        latches: Latches | None = None,
        earlier: str | None = None,
    ) -> None:
        """`earlier`: for a follow-up session, the stored conversation of the session it continues."""
        self.snapshot = snapshot
        self._request = request
        self._language = request.language
        self._model = prepared.model
        self._faults = prepared.faults
        self._holds = prepared.holds
        self._latches = latches or Latches()
        self._finish_requested = asyncio.Event()  # wakes a turn held on a latch, so finish-now is not held up
        self._world = world
        self._store = store
        self._on_finished = on_finished
        self.max_steps = min(TURN_MAX_STEPS_HELPER, request.limits.max_steps)
        self.max_input_tokens = min(INPUT_CEILING_TOKENS, request.limits.max_input_tokens)
        # A follow-up gets instructions of its own boundary: its authority may be wider than the earlier one's.
        instructions = system_instructions(request.boundary, request.language, follow_up=earlier is not None)
        if earlier is None:
            self._conversation = Conversation(instructions=instructions, task=request.task)
        else:
            self._conversation = follow_up_conversation(load_conversation(earlier, instructions), request.task)
        self._task: asyncio.Task[None] | None = None
        self._delayed_stop: asyncio.Task[None] | None = None
        self._stopping: Literal["cancel", "abort"] | None = None

    @property
    def session_id(self) -> str:
        return self.snapshot.session_id

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"turn-{self.session_id}")
        self._task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if self._delayed_stop is not None:
            self._delayed_stop.cancel()  # the turn ended first; nothing is left to stop
        if not task.cancelled() and task.exception() is not None:
            logger.error("turn %s crashed", self.session_id, exc_info=task.exception())
        self._on_finished(self.session_id)

    def _save(self) -> None:
        # Stopped where a follow-up may continue it: the conversation goes with the same write.
        stopped = self.snapshot.status in PAUSED_OR_PARTIAL
        self._store.save(self.snapshot, dump_conversation(self._conversation) if stopped else None)

    # Requests from the API.

    def request_finish(self) -> None:
        """Finish now: the next call is final, without tools (a hung model never makes it)."""
        if self.snapshot.status is SessionStatus.RUNNING and not self.snapshot.finish_requested:
            self.snapshot.finish_requested = True
            self._save()
            self._finish_requested.set()

    async def cancel(self) -> CancelAnswer:
        snapshot = self.snapshot
        if snapshot.status.is_terminal:
            return CancelAnswer(stopped=True, status=snapshot.status)
        if snapshot.status is not SessionStatus.RUNNING:
            cancel_now(snapshot, self._language)  # paused: nothing runs, so it stops at once
            self._save()
            return CancelAnswer(stopped=True, status=snapshot.status)
        if not snapshot.cancel_requested:
            snapshot.cancel_requested = True
            self._save()
        if self._faults.ignores_cancel:
            return CancelAnswer(stopped=False, status=snapshot.status)
        if self._faults.cancel_delay_ms > 0 or self._holds.cancel_until is not None:
            if self._delayed_stop is None:
                self._delayed_stop = asyncio.create_task(self._stop_later(self._faults.cancel_delay_ms / 1000))
            return CancelAnswer(stopped=False, status=snapshot.status)
        await self._stop("cancel")
        return CancelAnswer(stopped=True, status=snapshot.status)

    async def abort(self) -> None:
        """Stop the task without writing anything (reset, or shutdown: a restart then interrupts it)."""
        if self._delayed_stop is not None:
            self._delayed_stop.cancel()
        await self._stop("abort")

    async def _stop_later(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        if self._holds.cancel_until is not None:
            await self._latches.wait(self._holds.cancel_until, self._holds.timeout_ms)
        self._delayed_stop = None  # from here on this is the stop itself, not a pending one
        await self._stop("cancel")

    async def _stop(self, how: Literal["cancel", "abort"]) -> None:
        task = self._task
        if task is None or task.done():
            return
        self._stopping = how
        task.cancel()
        await asyncio.wait({task})
        if how == "cancel" and self.snapshot.status is SessionStatus.RUNNING:
            cancel_now(self.snapshot, self._language)  # cancelled before its first step ran
            self._save()

    # The turn itself.

    async def _run(self) -> None:
        try:
            await self._steps()
        except asyncio.CancelledError:
            if self._stopping == "cancel" and self.snapshot.status is SessionStatus.RUNNING:
                cancel_now(self.snapshot, self._language)
                self._save()
            raise
        except ModelError as error:
            self._fail(str(error))
        except Exception as error:
            logger.exception("turn %s failed inside the core", self.session_id)
            self._fail(f"internal error in the core: {error}")

    def _fail(self, error: str) -> None:
        self.snapshot.error = error
        end_session(
            self.snapshot,
            SessionStatus.FAILED,
            _with_last_message(text("outcome.failed", self._language, error=error), self.snapshot, self._language),
            self._language,
        )
        self._save()

    def _final_reason(self, index: int) -> StopReason | None:
        if self.snapshot.finish_requested:
            return StopReason.FINISH_NOW
        # Checked between calls, so the call that crossed the ceiling has already run in full.
        if self.snapshot.input_tokens_total >= self.max_input_tokens:
            return StopReason.INPUT
        if index >= self.max_steps:
            return StopReason.STEPS
        return None

    async def _steps(self) -> None:
        while True:
            index = len(self.snapshot.steps) + 1
            if self._holds.until is not None and index == self._holds.at_step:
                # Held before this call until released; a cancel ends the wait by cancelling the task.
                await self._latches.wait(self._holds.until, self._holds.timeout_ms, finish=self._finish_requested)
            final_reason = self._final_reason(index)
            if final_reason is not None:
                notice = final_call_notice(final_reason, self._language, self.max_steps, self.max_input_tokens)
                self._conversation = self._conversation.with_items(CoreNotice(notice))
            request = ModelRequest(
                index=index,
                conversation=self._conversation,
                tools=() if final_reason is not None else TOOL_SPECS,
                language=self._language,
            )
            reply = await self._model.complete(request)
            self._record_usage(index, reply.usage)
            if final_reason is not None:
                self._end_partial(final_reason, reply)
                return
            if reply.text:
                self.snapshot.last_message = reply.text
            self._conversation = self._conversation.with_items(AssistantTurn(reply.text, reply.tool_calls))
            if not reply.tool_calls:
                end_session(
                    self.snapshot,
                    SessionStatus.COMPLETED,
                    reply.text or self.snapshot.last_message,
                    self._language,
                )
                self._save()
                return
            self._run_tools(reply.tool_calls)
            self._save()
            if self.snapshot.status is not SessionStatus.RUNNING:
                return  # paused on a question or an authorization wait

    def _record_usage(self, index: int, usage: Usage) -> None:
        self.snapshot.steps.append(
            StepUsage(
                index=index,
                input_tokens=usage.input_tokens,
                cached_input_tokens=usage.cached_input_tokens,
                output_tokens=usage.output_tokens,
                compacted=usage.compacted,
            )
        )
        self.snapshot.input_tokens_total += usage.input_tokens

    def _end_partial(self, reason: StopReason, reply: ModelReply) -> None:
        if reply.text:
            self.snapshot.last_message = reply.text
        # A follow-up carries the partial answer too (a final call's tool calls are never run).
        self._conversation = self._conversation.with_items(AssistantTurn(reply.text))
        key = {
            StopReason.STEPS: "stop.steps",
            StopReason.INPUT: "stop.input",
            StopReason.FINISH_NOW: "stop.finish_now",
        }[reason]
        explanation = text(key, self._language, max_steps=self.max_steps, max_input_tokens=self.max_input_tokens)
        message = self.snapshot.last_message or text("stop.no_message", self._language)
        end_session(self.snapshot, SessionStatus.PARTIAL, f"{explanation}\n\n{message}", self._language, reason)
        self._save()

    def _run_tools(self, calls: tuple[ToolCall, ...]) -> None:
        """Carry out the calls in order; a pause (question, authorization) skips the rest."""
        results: list[ToolResult] = []
        for call in calls:
            if call.name in (ASK_OWNER, REQUEST_AUTHORIZATION):
                try:
                    arguments = parse_arguments(call)
                except ValueError as error:
                    results.append(ToolResult(call.call_id, call.name, f"error: {error}"))
                    continue
                self._pause(arguments)
                break
            outcome = run_world_tool(
                call,
                world=self._world,
                boundary=self._request.boundary,
                language=self._language,
                grants=self._request.grants,
                use_grant=self._use_grant,
            )
            if outcome.action is not None:
                self.snapshot.actions.append(outcome.action)
            if outcome.refusal is not None:
                self.snapshot.refusals.append(outcome.refusal)
            results.append(ToolResult(call.call_id, call.name, outcome.content))
        self._conversation = self._conversation.with_items(*results)

    def _use_grant(self, grant_id: str) -> bool:
        return self._store.use_grant(grant_id, self.session_id)

    def _pause(self, arguments: object) -> None:
        if isinstance(arguments, AskOwnerArgs):
            self.snapshot.question = arguments.question
            # A question the model did not name is named after its session and step: never reused.
            choices = arguments.choices(made_up_id=f"{self.session_id}-{len(self.snapshot.steps)}")
            self.snapshot.choices = choices
            body = _with_choices(
                text("outcome.question", self._language, question=arguments.question), choices, self._language
            )
            end_session(self.snapshot, SessionStatus.QUESTION, body, self._language)
        elif isinstance(arguments, RequestAuthorizationArgs):
            self.snapshot.authorization = Authorization(action=arguments.action, reason=arguments.reason)
            body = text("outcome.authorization", self._language, action=arguments.action)
            end_session(self.snapshot, SessionStatus.AUTHORIZATION, body, self._language)
