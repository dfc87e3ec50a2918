"""Follow-ups, the contract's optional continuation: a create with `continue_from` makes a new session
whose conversation is the named session's plus the new task.

A core advertises it with `GET /v1/capabilities` answering `continue_from: true`; for any other core these checks
are skipped (the runtime never asks it for a follow-up). The reference core must pass them.

The context is shown carried by the scripted model's `recall`: the earlier session's task holds a fact, and the
follow-up, whose own task does not, quotes the line that mentions it.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import pytest_asyncio

from contracts.core_api import SessionCreated, SessionStatus, Snapshot
from reference.core.script import scripted_task
from tests.conformance.contract import CoreUnderTest, check_problem, offering, unique

QUICK = {"step_ms": 5, "input_tokens": 1000, "input_growth": 500}
FACT = "The budget code is ZX-4711."
FACT_VALUE = "ZX-4711"
RECIPIENT = "bob@example.com"


@pytest_asyncio.fixture
async def follow_ups(core: CoreUnderTest, core_is_reference: bool) -> CoreUnderTest:
    """The core under test, when it advertises follow-ups; else the test is skipped."""
    return await offering(core, "continue_from", core_is_reference)


async def _post_follow_up(core: CoreUnderTest, source_id: str, task: str, **fields: Any) -> httpx.Response:
    body = core.body(task, **fields)
    body["continue_from"] = source_id
    return await core.http.post("/v1/sessions", json=body)


async def _follow_up(core: CoreUnderTest, source_id: str, task: str, **fields: Any) -> str:
    response = await _post_follow_up(core, source_id, task, **fields)
    assert response.status_code == 201, response.text
    created = SessionCreated.model_validate(response.json())
    assert created.created is True and created.session_id != source_id
    return created.session_id


async def _question(core: CoreUnderTest, **fields: Any) -> tuple[str, Snapshot]:
    """A session paused on a question whose task holds FACT."""
    task = scripted_task(f"Plan the offsite\n{FACT}", steps=2, end="question", question="Which week?", **QUICK)
    session_id = await core.create(task, **fields)
    paused = await core.settled(session_id)
    assert paused.status is SessionStatus.QUESTION
    return session_id, paused


def _answer(**fields: Any) -> str:
    """The owner's answer, as a follow-up task that quotes what it recalls of the budget code."""
    return scripted_task("The second week of May.", **{"steps": 2, "recall": "budget code", **QUICK, **fields})


def _mentions_fact(snapshot: Snapshot) -> bool:
    return snapshot.outcome is not None and FACT_VALUE in snapshot.outcome.text


async def test_a_follow_up_of_a_question_carries_the_conversation(follow_ups: CoreUnderTest) -> None:
    """The follow-up's model sees the earlier session's conversation: it quotes the fact the earlier
    task held, which its own task does not; a session without `continue_from` does not know it."""
    core = follow_ups
    source_id, _ = await _question(core)
    answer = _answer()
    assert FACT_VALUE not in answer

    follow_up_id = await _follow_up(core, source_id, answer)
    done = await core.settled(follow_up_id)
    fresh = await core.settled(await core.create(answer))

    assert done.status is SessionStatus.COMPLETED and _mentions_fact(done), done.outcome
    assert FACT_VALUE in done.last_message
    assert fresh.status is SessionStatus.COMPLETED and not _mentions_fact(fresh), fresh.outcome


async def test_a_follow_up_is_a_new_session_with_counters_of_its_own(follow_ups: CoreUnderTest) -> None:
    """A follow-up has its own id, steps from 1 and input from zero, and its own ceilings (here a step
    limit of 3 it reaches although the earlier session used 2 steps); the earlier session does not change."""
    core = follow_ups
    source_id, paused = await _question(core)

    follow_up_id = await _follow_up(core, source_id, _answer(end="run"), max_steps=3)
    ended = await core.settled(follow_up_id)
    source_after = await core.snapshot(source_id)

    assert follow_up_id != source_id
    assert [step.index for step in ended.steps] == [1, 2, 3]
    assert ended.input_tokens_total == sum(step.input_tokens for step in ended.steps)
    assert ended.status is SessionStatus.PARTIAL and ended.outcome is not None
    assert ended.outcome.stop_reason is not None and ended.outcome.stop_reason.value == "steps"
    assert ended.actions == [] and ended.question is None
    assert source_after == paused


@pytest.mark.parametrize("cancelled", [False, True], ids=["waiting", "cancelled while waiting"])
async def test_a_follow_up_with_a_wider_boundary_performs_the_waiting_action_once(
    follow_ups: CoreUnderTest, cancelled: bool
) -> None:
    """R33: a session that waited for authorization (and was then cancelled, as the runtime's cleanup
    does) is continued with a boundary that authorizes the action: the follow-up performs it, once; repeating
    its create changes nothing."""
    core = follow_ups
    waiting = scripted_task(
        f"Mail the Q3 report to Bob\n{FACT}", steps=1, end="authorization", authorization=f"mail {RECIPIENT}", **QUICK
    )
    source_id = await core.create(waiting)
    paused = await core.settled(source_id)
    assert paused.status is SessionStatus.AUTHORIZATION and paused.actions == []
    if cancelled:
        answer = await core.cancel(source_id)
        assert answer.stopped and answer.status is SessionStatus.CANCELLED
    send = {"step": 1, "tool": "send_mail", "args": {"to": RECIPIENT, "subject": "Q3 report", "body": "Attached."}}
    task = _answer(tool_calls=[send])
    body_fields: dict[str, Any] = {
        "boundary": (f"send_mail to {RECIPIENT}",),
        "key": unique("follow-up-key"),
        "helper_id": unique("h"),
    }

    follow_up_id = await _follow_up(core, source_id, task, **body_fields)
    done = await core.settled(follow_up_id)
    repeated = await _post_follow_up(core, source_id, task, **body_fields)
    again = await core.snapshot(follow_up_id)
    source_after = await core.snapshot(source_id)

    assert done.status is SessionStatus.COMPLETED and _mentions_fact(done), done.outcome
    assert [(action.tool, action.whom.lower()) for action in done.actions] == [("send_mail", RECIPIENT)]
    assert done.refusals == []
    assert repeated.status_code == 200 and SessionCreated.model_validate(repeated.json()).session_id == follow_up_id
    assert again == done
    assert source_after.actions == [], "the earlier session never performs the action"


async def test_a_partial_outcome_can_be_continued(follow_ups: CoreUnderTest) -> None:
    """A session that ended partial (finish-now) is continued with its conversation."""
    core = follow_ups
    source_id = await core.create(scripted_task(f"Draft the digest\n{FACT}", end="run", steps=80, step_ms=50))
    await core.wait_for(source_id, lambda snapshot: len(snapshot.steps) >= 1)
    await core.finish(source_id)
    ended = await core.settled(source_id)
    assert ended.status is SessionStatus.PARTIAL

    done = await core.settled(await _follow_up(core, source_id, _answer()))

    assert done.status is SessionStatus.COMPLETED and _mentions_fact(done), done.outcome


async def test_another_owners_session_is_refused(follow_ups: CoreUnderTest) -> None:
    """Only the owner's own sessions can be continued: 409 `continue_from_other_owner`, naming the
    field; the refused create writes nothing, so its key still starts a session."""
    core = follow_ups
    source_id, _ = await _question(core, owner="conformance-other")
    same: dict[str, Any] = {"key": unique("follow-up-key"), "helper_id": unique("h")}

    problem = check_problem(response := await _post_follow_up(core, source_id, _answer(), **same))
    later = await _post_follow_up(core, (await _question(core))[0], _answer(), **same)

    assert response.status_code == 409 and problem.code == "continue_from_other_owner", problem
    assert "continue_from" in problem.message and "owner" in problem.message
    assert later.status_code == 201, later.text


async def test_a_reset_session_is_refused(follow_ups: CoreUnderTest) -> None:
    """R20: a reset session has nothing left to continue: 409 `continue_from_reset`."""
    core = follow_ups
    source_id, _ = await _question(core)
    reset = await core.http.post(f"/v1/sessions/{source_id}/reset")
    assert reset.status_code == 200 and reset.json() == {"reset": True}
    core.forget(source_id)

    response = await _post_follow_up(core, source_id, _answer())
    problem = check_problem(response)

    assert response.status_code == 409 and problem.code == "continue_from_reset", problem
    assert source_id in problem.message


async def test_an_unknown_session_is_refused(follow_ups: CoreUnderTest) -> None:
    """A session the core never made: 409 `continue_from_not_found`, naming it."""
    missing = unique("s-missing")

    response = await _post_follow_up(follow_ups, missing, _answer())
    problem = check_problem(response)

    assert response.status_code == 409 and problem.code == "continue_from_not_found", problem
    assert missing in problem.message


@pytest.mark.parametrize("end", ["run", "complete", "fail"])
async def test_a_session_that_did_not_stop_for_the_owner_is_refused(follow_ups: CoreUnderTest, end: str) -> None:
    """A running, completed or failed session cannot be continued: 409 `continue_from_not_continuable`
    naming its status."""
    core = follow_ups
    # A running one takes 8 s to reach its step ceiling (then it would be partial, which can be continued).
    timing = {**QUICK, "step_ms": 100} if end == "run" else QUICK
    source_id = await core.create(scripted_task("Not continuable", end=end, steps=80 if end == "run" else 2, **timing))
    state = await core.snapshot(source_id) if end == "run" else await core.settled(source_id)

    response = await _post_follow_up(core, source_id, _answer())
    problem = check_problem(response)
    if end == "run":
        await core.cancel(source_id)

    assert response.status_code == 409 and problem.code == "continue_from_not_continuable", problem
    assert source_id in problem.message
    if end != "run":
        assert state.status.value in problem.message


async def test_a_second_follow_up_is_refused_naming_the_first(follow_ups: CoreUnderTest) -> None:
    """A session is continued at most once: another key is 409 `continue_from_already_continued`
    naming the existing follow-up; the same key answers 200 with that follow-up."""
    core = follow_ups
    source_id, _ = await _question(core)
    repeat: dict[str, Any] = {"key": unique("follow-up-key"), "helper_id": unique("h")}
    first_id = await _follow_up(core, source_id, _answer(), **repeat)

    second = await _post_follow_up(core, source_id, _answer())
    problem = check_problem(second)
    same = await _post_follow_up(core, source_id, _answer(), **repeat)

    assert second.status_code == 409 and problem.code == "continue_from_already_continued", problem
    assert first_id in problem.message
    assert same.status_code == 200, same.text
    assert SessionCreated.model_validate(same.json()) == SessionCreated(session_id=first_id, created=False)
    await core.settled(first_id)


async def test_resetting_the_earlier_session_leaves_the_follow_up_intact(follow_ups: CoreUnderTest) -> None:
    """R20: the runtime resets the earlier session once the follow-up has its own; the follow-up goes
    on with what it carried, and is continued again itself."""
    core = follow_ups
    source_id, _ = await _question(core)
    follow_up_id = await _follow_up(core, source_id, _answer(end="question", step_ms=100))

    reset = await core.http.post(f"/v1/sessions/{source_id}/reset")
    assert reset.status_code == 200 and reset.json() == {"reset": True}
    core.forget(source_id)
    paused = await core.settled(follow_up_id)
    gone = await core.read(source_id)
    last_id = await _follow_up(core, follow_up_id, _answer())
    done = await core.settled(last_id)

    assert gone.status_code == 404
    assert paused.status is SessionStatus.QUESTION and FACT_VALUE in paused.last_message, paused
    assert done.status is SessionStatus.COMPLETED and _mentions_fact(done), done.outcome
