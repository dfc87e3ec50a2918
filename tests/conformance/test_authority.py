"""The task's authority on the core's tools (R33): outside the boundary an irreversible action is refused, and
the refusal is in the outcome, in the owner's language (R32)."""

from __future__ import annotations

import pytest

from domain.core_api import SessionStatus
from reference_core.script import scripted_task
from tests.conformance.contract import CoreUnderTest, in_english, in_russian

QUICK = {"step_ms": 5, "input_tokens": 1000, "input_growth": 500}
SEND = {"step": 1, "tool": "send_mail", "args": {"to": "bob@example.com", "subject": "Q3 figures"}}
EVENT = {"step": 2, "tool": "create_event", "args": {"title": "Q3 review", "when": "2026-11-03 10:00"}}
DRAFT = {"step": 2, "tool": "draft_mail", "args": {"to": "alice@example.com", "subject": "Lunch"}}


@pytest.mark.parametrize("language", ["en", "ru"])
async def test_irreversible_actions_outside_the_boundary_are_refused_and_reported(
    core: CoreUnderTest, language: str
) -> None:
    """R33, R32, R18: with an empty boundary, send and create are refused, recorded and named in the outcome."""
    task = scripted_task("Prepare the Q3 follow-up", steps=3, tool_calls=[SEND, EVENT, DRAFT], **QUICK)
    session_id = await core.create(task, language=language)

    final = await core.settled(session_id)

    assert final.status is SessionStatus.COMPLETED
    assert [(action.tool, action.whom) for action in final.actions] == [("draft_mail", "alice@example.com")]
    assert len(final.refusals) == 2
    assert "bob@example.com" in final.refusals[0] and "Q3 review" in final.refusals[1]
    in_language = in_russian if language == "ru" else in_english
    assert final.outcome is not None
    for refusal in final.refusals:
        assert in_language(refusal.replace("send_mail", "").replace("create_event", "")), refusal
        assert refusal in final.outcome.text


async def test_actions_inside_the_boundary_are_performed_with_whom_and_when(core: CoreUnderTest) -> None:
    """R33, R18: named actions run, each recorded with whom it affected, what happened and when."""
    task = scripted_task("Send the Q3 figures", steps=3, tool_calls=[SEND, EVENT], **QUICK)
    session_id = await core.create(task, boundary=("Send mail to bob@example.com", "create-event"))

    final = await core.settled(session_id)

    assert final.refusals == []
    sent, event = final.actions
    assert (sent.tool, sent.whom) == ("send_mail", "bob@example.com") and sent.what
    assert event.tool == "create_event" and "Q3 review" in event.what
    assert sent.at <= event.at
