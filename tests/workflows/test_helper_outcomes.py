"""The helper workflow's outcome paths with stand-in activities, in the samples' style (R13, R15-R21, R24, R35, R38).

The real `HelperWorkflow` runs on the time-skipping server; every activity it calls is a stand-in registered
under the real name, scripted per test, and a small recording coordinator takes its notices. Each path takes
well under a second: the end-to-end tests prove the same paths with the real activities and cores.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from contracts.core_api import QuestionChoices, QuestionOption, SessionStatus
from domain.limits import FollowTuning, Limits
from domain.messages.activities import (
    CancelResult,
    Finalize,
    Finalized,
    FollowRequest,
    FollowResult,
    MarkClosed,
    OpenedSession,
    OpenSession,
    ParkSession,
    RecoveredSession,
    RecoverSession,
    SessionRef,
    Verdict,
    WrittenOutcome,
)
from domain.messages.signals import FinishedNotice, Token
from domain.messages.workflows import HelperResult, HelperStart
from domain.outcome import OutcomeKind
from domain.rows import RowState
from domain.work import Usage
from protocol.errors import ErrorType
from protocol.names import (
    CANCEL_SESSION,
    CLOSE,
    FINALIZE_OUTCOME,
    FINISH_SESSION,
    FOLLOW_SESSION,
    HELPER_CLOSED,
    HELPER_FINISHED,
    HELPER_OUTCOME,
    MARK_CLOSED,
    OPEN_SESSION,
    PARK_SESSION,
    RECOVER_SESSION,
    RESET_SESSION,
    coordinator_id,
    follows_task_queue,
    helper_workflow_id,
)
from workflows.helper import HelperWorkflow

LIMITS = Limits(deadline_ms=60_000, grace_ms=30_000)
# Every path ends within seconds of real time; a wedged test server must fail the test, not hang the suite.
RESULT_WAIT_S = 60


@dataclass
class Script:
    """What the stand-in activities answer, and what they were asked, in order."""

    follow: list[FollowResult | None] = field(default_factory=list)  # None: the window ends, retried later
    open_fails: bool = False  # the core refuses the create
    open_hangs: bool = False  # the create is never answered
    open_down: int = 0  # the first creates find the core down (retried), then it answers
    reset_refused: bool = False  # the core refuses the reset for good
    reset_fails: int = 0  # the first resets fail (retried with backoff), then the core resets
    open_delay_s: float = 0.0  # the first create takes this long (real time: it holds the workflow task)
    cancel_stops: bool = True
    already: WrittenOutcome | None = None  # the row's outcome, written by an earlier run of the finalization
    calls: list[tuple[str, Any]] = field(default_factory=list)
    finals: list[Finalize] = field(default_factory=list)

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


SCRIPT: list[Script] = [Script()]


def script() -> Script:
    return SCRIPT[0]


@activity.defn(name=OPEN_SESSION)
async def open_session(request: OpenSession) -> OpenedSession:
    script().calls.append(("open", request))
    if script().open_delay_s and script().names().count("open") == 1:
        await asyncio.sleep(script().open_delay_s)
    if script().open_fails:
        raise ApplicationError("core refused (400): unknown model", type=ErrorType.CORE_REJECTED, non_retryable=True)
    if script().open_hangs:
        raise ApplicationError("no answer", type=ErrorType.CORE_UNAVAILABLE, category=ApplicationErrorCategory.BENIGN)
    if script().names().count("open") <= script().open_down:
        raise ApplicationError("core down", type=ErrorType.CORE_UNAVAILABLE, category=ApplicationErrorCategory.BENIGN)
    return OpenedSession(session_id="s-1", created=True)


@activity.defn(name=FOLLOW_SESSION)
async def follow_session(request: FollowRequest) -> FollowResult:
    script().calls.append(("follow", request))
    answer = script().follow.pop(0) if script().follow else None
    if answer is None:
        raise ApplicationError("window", type=ErrorType.FOLLOW_WINDOW_ELAPSED, category=ApplicationErrorCategory.BENIGN)
    if answer.verdict is Verdict.TERMINAL:
        # Let a finish-now or cancel sent beside this follow answer first: the time-skipping test server wedges
        # when an activity completes in the very workflow task that cancels it (sdk-java#2391), a race the real
        # server handles.
        await asyncio.sleep(0.3)
    return answer


@activity.defn(name=FINISH_SESSION)
async def finish_session(ref: SessionRef) -> bool:
    script().calls.append(("finish", ref))
    return True


@activity.defn(name=CANCEL_SESSION)
async def cancel_session(ref: SessionRef) -> CancelResult:
    script().calls.append(("cancel", ref))
    return CancelResult(stopped=script().cancel_stops)


@activity.defn(name=RESET_SESSION)
async def reset_session(ref: SessionRef) -> bool:
    script().calls.append(("reset", ref))
    if script().reset_refused:
        raise ApplicationError("core refused (409): session busy", type=ErrorType.CORE_REJECTED, non_retryable=True)
    if script().names().count("reset") <= script().reset_fails:
        raise ApplicationError("core down", type=ErrorType.CORE_UNAVAILABLE, category=ApplicationErrorCategory.BENIGN)
    return True


@activity.defn(name=PARK_SESSION)
async def park_session(park: ParkSession) -> None:
    script().calls.append(("park", park))


@activity.defn(name=RECOVER_SESSION)
async def recover_session(request: RecoverSession) -> RecoveredSession:
    script().calls.append(("recover", request))
    return RecoveredSession(session_id="s-lost", stopped=True)


@activity.defn(name=MARK_CLOSED)
async def mark_closed(close: MarkClosed) -> bool:
    script().calls.append(("mark_closed", close))
    return True


@activity.defn(name=FINALIZE_OUTCOME)
async def finalize_outcome(final: Finalize) -> Finalized:
    script().calls.append(("finalize", final))
    script().finals.append(final)
    if script().already is not None:
        return Finalized(applied=False, summary="", result_dir="/tmp/x", already=script().already)
    return Finalized(applied=True, summary=final.explanation[:100], result_dir="/tmp/x")


@workflow.defn(name="RecordingCoordinator")
class RecordingCoordinator:
    """Stands in for the coordinator: it records what the helper tells it."""

    def __init__(self) -> None:
        self.notices: list[str] = []

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal(name=HELPER_FINISHED)
    def finished(self, notice: FinishedNotice) -> None:
        self.notices.append(f"finished:{notice.kind.value}" + (":slot held" if notice.slot_held else ""))

    @workflow.signal(name=HELPER_CLOSED)
    def closed(self, helper_id: str) -> None:
        self.notices.append(f"closed:{helper_id}")

    @workflow.query
    def told(self) -> list[str]:
        return self.notices


@dataclass
class Run:
    env: WorkflowEnvironment
    task_queue: str
    owner: str


@pytest.fixture
async def run(time_env: WorkflowEnvironment) -> AsyncIterator[Run]:
    SCRIPT[0] = Script()
    task_queue = f"outcomes-{uuid.uuid4().hex[:8]}"
    activities: list[Callable[..., Any]] = [
        open_session,
        follow_session,
        finish_session,
        cancel_session,
        reset_session,
        park_session,
        recover_session,
        mark_closed,
        finalize_outcome,
    ]
    async with (
        Worker(
            time_env.client,
            task_queue=task_queue,
            workflows=[HelperWorkflow, RecordingCoordinator],
            activities=[fn for fn in activities if fn is not follow_session],
        ),
        Worker(time_env.client, task_queue=follows_task_queue(task_queue), activities=[follow_session]),
    ):
        owner = f"o{uuid.uuid4().hex[:6]}"
        await time_env.client.start_workflow(RecordingCoordinator.run, id=coordinator_id(owner), task_queue=task_queue)
        yield Run(time_env, task_queue, owner)


def _start(owner: str) -> HelperStart:
    return HelperStart(
        owner=owner,
        helper_id="h1",
        seq=1,
        language="en",
        model="scripted",
        limits=LIMITS,
        slot_granted=True,
        summary_max=1_500,
        check_ms=1_000,
        keep_ms=86_400_000,
        follow=FollowTuning(poll_ms=50, window_ms=100, resume_ms=20_000),
        title="a task",
    )


def terminal(status: SessionStatus, **fields: Any) -> FollowResult:
    return FollowResult(verdict=Verdict.TERMINAL, status=status, usage=Usage(steps=2, work_tokens=300), **fields)


async def _outcome(run: Run, *, close_after: float | None = None) -> tuple[OutcomeKind, Finalize, list[str]]:
    handle = await run.env.client.start_workflow(
        HelperWorkflow.run, _start(run.owner), id=helper_workflow_id(run.owner, "h1"), task_queue=run.task_queue
    )
    if close_after is not None:
        await asyncio.sleep(close_after)
        await handle.signal(CLOSE, Token())
    try:
        result = await asyncio.wait_for(handle.result(), RESULT_WAIT_S)
    except WorkflowFailureError as failure:
        # A failed outcome fails the workflow, with the owner's explanation as its message (the Web UI shows it).
        cause = failure.cause
        assert isinstance(cause, ApplicationError) and cause.type == ErrorType.HELPER_FAILED
        result = HelperResult.model_validate(cause.details[0])
        assert result.outcome is OutcomeKind.FAILED and cause.message == result.reason
    assert isinstance(result, HelperResult)
    told = await run.env.client.get_workflow_handle(coordinator_id(run.owner)).query(RecordingCoordinator.told)
    assert len(script().finals) == 1, "exactly one finalization (R19)"
    assert result.reason == script().finals[0].explanation, "the workflow's result says why"
    return result.outcome, script().finals[0], told


async def test_completed(run: Run) -> None:
    """R18, R20: a completed turn is finalized once, the slot handed back, the session reset."""
    script().follow = [terminal(SessionStatus.COMPLETED)]
    kind, final, told = await _outcome(run)
    assert kind == OutcomeKind.COMPLETED and final.state is RowState.UNREPORTED and final.explanation == ""
    assert told == ["finished:completed"]
    assert script().names() == ["open", "follow", "finalize", "reset"]


async def test_an_outcome_written_by_a_lost_task_is_the_one_the_workflow_ends_with(run: Run) -> None:
    """R19: the finalization finds the row final already (a workflow task that ran it was lost, and this run
    decided otherwise: the session it looks at was reset by the lost one): the workflow's result, its search
    attributes and the coordinator's notice take the written outcome."""
    script().follow = [FollowResult(verdict=Verdict.LOST, error="no session s-1")]
    script().already = WrittenOutcome(kind=OutcomeKind.COMPLETED, explanation="")
    handle = await run.env.client.start_workflow(
        HelperWorkflow.run, _start(run.owner), id=helper_workflow_id(run.owner, "h1"), task_queue=run.task_queue
    )
    result = await asyncio.wait_for(handle.result(), RESULT_WAIT_S)
    told = await run.env.client.get_workflow_handle(coordinator_id(run.owner)).query(RecordingCoordinator.told)
    description = await handle.describe()
    assert script().finals[0].kind is OutcomeKind.INTERRUPTED  # what this run decided
    assert isinstance(result, HelperResult) and (result.outcome, result.reason) == (OutcomeKind.COMPLETED, "")
    assert told == ["finished:completed"]
    assert description.typed_search_attributes.get(HELPER_OUTCOME) == "completed"


async def test_a_quick_helper_holds_the_open_the_follow_the_outcome_the_notice_and_the_reset(run: Run) -> None:
    """R8, R9, R19, R20, R44: a quick helper's history: the open's first attempt and the outcome's write as
    local activities (markers), the follow and the reset as activities, the finished notice as one signal."""
    script().follow = [terminal(SessionStatus.COMPLETED)]
    kind, _, _ = await _outcome(run)
    events, scheduled = await _history(run)
    assert kind == OutcomeKind.COMPLETED
    assert scheduled == ["follow_session", "reset_session"]
    assert events.count("MARKER_RECORDED") == 2
    assert events.count("SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED") == 1


async def test_a_first_open_that_finds_the_core_down_goes_on_as_an_activity(run: Run) -> None:
    """R9, R25: the local attempt fails; the open goes on as an activity, retried, under the same key."""
    script().open_down = 2
    script().follow = [terminal(SessionStatus.COMPLETED)]
    kind, _, told = await _outcome(run)
    opens = [request for name, request in script().calls if name == "open"]
    assert kind == OutcomeKind.COMPLETED and told == ["finished:completed"]
    assert len(opens) == 3 and len({request.idempotency_key for request in opens}) == 1
    _, scheduled = await _history(run)
    assert scheduled == ["open_session", "follow_session", "reset_session"]


async def test_a_reset_the_core_refuses_parks_the_session_and_leaves_the_outcome_and_the_slot(run: Run) -> None:
    """R20: the reset is cleanup: a core that refuses it changes neither the outcome nor the notice; the session
    is parked (for the hourly sweep) and the workflow completes."""
    script().reset_refused = True
    script().follow = [terminal(SessionStatus.COMPLETED)]
    kind, _, told = await _outcome(run)
    assert kind == OutcomeKind.COMPLETED and told == ["finished:completed"]
    assert script().names() == ["open", "follow", "finalize", "reset", "park"]
    park = script().calls[-1][1]
    assert park.session_id == "s-1" and "session busy" in park.error


async def test_a_reset_that_fails_for_a_while_is_retried_with_backoff_not_parked(run: Run) -> None:
    """R20: a core that fails the reset for about a minute (six failures, the retries backing off) still gets
    it: the session is reset, not parked. Three tries and a park would leave it parked."""
    script().reset_fails = 6
    script().follow = [terminal(SessionStatus.COMPLETED)]
    kind, _, told = await _outcome(run)
    assert kind == OutcomeKind.COMPLETED and told == ["finished:completed"]
    assert script().names().count("reset") == 7
    assert "park" not in script().names()


async def test_question(run: Run) -> None:
    """R16: a question ends the helper with an outcome that carries it."""
    script().follow = [FollowResult(verdict=Verdict.QUESTION, question="Which venue?")]
    kind, final, _ = await _outcome(run)
    assert kind == OutcomeKind.QUESTION and final.question == "Which venue?" and final.choices is None


async def test_a_question_with_choices_ends_with_an_outcome_that_offers_them(run: Run) -> None:
    """R49: a structured question's choices go whole from the follow's result to the one outcome written."""
    choices = QuestionChoices(
        question_id="venue",
        options=[QuestionOption(id="hall-a", label="Hall A"), QuestionOption(id="roof", label="The roof")],
    )
    script().follow = [FollowResult(verdict=Verdict.QUESTION, question="Which venue?", choices=choices)]
    kind, final, _ = await _outcome(run)
    assert kind == OutcomeKind.QUESTION and (final.question, final.choices) == ("Which venue?", choices)


async def test_authorization_is_cancelled_beside_the_follow(run: Run) -> None:
    """R17, R35: an authorization wait: a cleanup cancel runs beside the follow; a confirmed stop ends it with
    the authorization that was asked for."""
    script().follow = [FollowResult(verdict=Verdict.AUTHORIZATION, authorization="pay invoice 1044"), None]
    kind, final, _ = await _outcome(run)
    assert kind == OutcomeKind.AUTHORIZATION and final.authorization == "pay invoice 1044"
    follows = [request for name, request in script().calls if name == "follow"]
    assert follows[1].stop_at_pauses is False, "after the cleanup cancel the follow waits only for the end"
    assert "cancel" in script().names()


async def test_work_ceiling_asks_for_the_partial_and_keeps_following(run: Run) -> None:
    """R13: at the work ceiling finish-now is asked beside a follow that no longer watches the ceiling."""
    script().follow = [FollowResult(verdict=Verdict.WORK_CEILING), terminal(SessionStatus.PARTIAL)]
    kind, final, _ = await _outcome(run)
    assert kind == OutcomeKind.PARTIAL and "work ceiling" in final.explanation
    follows = [request for name, request in script().calls if name == "follow"]
    assert [f.watch_work_ceiling for f in follows] == [True, False]
    assert script().names().count("finish") == 1


async def test_lost_session_is_interrupted(run: Run) -> None:
    """R24: a session the core no longer knows ends interrupted, in plain words."""
    script().follow = [FollowResult(verdict=Verdict.LOST, error="GET /v1/sessions/s-1: no session")]
    kind, final, _ = await _outcome(run)
    assert kind == OutcomeKind.INTERRUPTED and "lost the session" in final.explanation
    assert "/v1/" not in final.explanation


async def test_a_refused_create_fails_without_a_session(run: Run) -> None:
    """R18, R38: the core refuses the create: failed in plain words, nothing to find or reset."""
    script().open_fails = True
    kind, final, told = await _outcome(run)
    assert kind == OutcomeKind.FAILED and "refused the task" in final.explanation
    assert "recover" not in script().names() and "reset" not in script().names()
    assert told == ["finished:failed"]


async def test_a_slow_first_open_does_not_move_the_hard_ceiling(run: Run) -> None:
    """R15: the open's first attempt holds the helper's first task for 3 s; the ceiling's timer starts after it
    with what is left, so the helper still ends at deadline + grace from when it started running, not later."""
    script().open_delay_s = 3.0
    kind, final, _ = await _outcome(run)
    ran = final.finished_at - _started_at()
    assert kind == OutcomeKind.PARTIAL
    assert timedelta(seconds=90) <= ran < timedelta(seconds=91), ran


async def test_hard_ceiling_while_the_core_never_finishes(run: Run) -> None:
    """R15, R35: the follow never decides; at the deadline finish-now is asked; at deadline + grace the helper
    ends partial with the hard-ceiling explanation whatever is still in flight."""
    kind, final, told = await _outcome(run)
    assert kind == OutcomeKind.PARTIAL and "did not finish within 30 seconds" in final.explanation
    assert final.finished_at - _started_at() >= timedelta(seconds=90)
    assert "finish" in script().names() and told == ["finished:partial"]


async def test_an_unanswered_create_is_found_before_the_slot_passes_on(run: Run) -> None:
    """R38, R2: no create answered by the hard ceiling: failed, and the coordinator told so at once with the slot
    still held; the session is looked up by its key and stopped, and only then does the slot pass on."""
    script().open_hangs = True
    kind, final, told = await _outcome(run)
    assert kind == OutcomeKind.FAILED and "did not confirm the start" in final.explanation
    names = script().names()
    assert names.index("recover") > names.index("finalize")
    recover = next(request for name, request in script().calls if name == "recover")
    assert recover.idempotency_key.startswith(helper_workflow_id(run.owner, "h1"))
    # The outcome is told at once (the helper is no longer open), the slot only after the search (R38).
    assert told == ["finished:failed:slot held", "finished:failed"]


async def test_close_while_running_keeps_the_slot_until_the_core_confirms(run: Run) -> None:
    """R7, R21: closed while running: the row closes at once and the coordinator hears of it; the cancel's
    confirmation ends the helper closed."""
    kind, final, told = await _outcome(run, close_after=0.5)
    assert kind == OutcomeKind.CLOSED and final.state is RowState.CLOSED
    assert final.keep_until is not None
    names = script().names()
    assert "mark_closed" in names and "cancel" in names
    assert told == ["closed:h1", "finished:closed"]


async def test_a_bare_close_is_ignored(run: Run) -> None:
    """R39: a close without its token (what a client without the codec keys can send) is ignored: the helper
    runs on to its own end."""
    script().follow = [None, terminal(SessionStatus.COMPLETED)]
    handle = await run.env.client.start_workflow(
        HelperWorkflow.run, _start(run.owner), id=helper_workflow_id(run.owner, "h1"), task_queue=run.task_queue
    )
    await handle.signal(CLOSE)
    result = await asyncio.wait_for(handle.result(), RESULT_WAIT_S)
    assert isinstance(result, HelperResult) and result.outcome is OutcomeKind.COMPLETED
    assert "cancel" not in script().names() and "mark_closed" not in script().names()


def _started_at() -> datetime:
    opened = next(request for name, request in script().calls if name == "open")
    started: datetime = opened.started_at
    return started.astimezone(UTC)


async def _history(run: Run) -> tuple[list[str], list[str]]:
    """The helper's event types, and the activity tasks it scheduled (local activities are markers)."""
    history = await run.env.client.get_workflow_handle(helper_workflow_id(run.owner, "h1")).fetch_history()
    events = [EventType.Name(event.event_type).removeprefix("EVENT_TYPE_") for event in history.events]
    scheduled = [
        event.activity_task_scheduled_event_attributes.activity_type.name
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    return events, scheduled
