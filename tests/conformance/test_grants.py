"""Grants, the contract's optional one-time permission (R55): a create may carry `grants`, each an action the owner
granted (a boundary item), bound to the SHA-256 digest of its tool and sorted targets. The core performs a call
whose tool and set of targets have that digest once per grant id, across every session that carries it, and refuses
any later one with a refusal in the snapshot that says `grant_used`.

A core advertises it with `GET /v1/capabilities` answering `grants: true`; for any other core these checks are
skipped (the runtime puts a grant in the boundary instead). The reference core must pass them.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest_asyncio

from contracts.core_api import SessionStatus
from domain.boundary import action_digest, parse_item
from reference.core.script import scripted_task
from tests.conformance.contract import CoreUnderTest, check_problem, offering

QUICK = {"step_ms": 5, "input_tokens": 1000, "input_growth": 500}
ANNA = "anna@example.com"
BOB = "bob@example.com"


@pytest_asyncio.fixture
async def grants(core: CoreUnderTest, core_is_reference: bool) -> CoreUnderTest:
    """The core under test, when it advertises grants; else the test is skipped."""
    return await offering(core, "grants", core_is_reference)


def grant(action: str) -> dict[str, str]:
    """A grant of `action` under a new id."""
    return {"id": uuid.uuid4().hex, "action": action, "digest": action_digest(parse_item(action))}


def send(step: int, to: str) -> dict[str, Any]:
    return {"step": step, "tool": "send_mail", "args": {"to": to, "subject": "Q3 report", "body": "Attached."}}


async def create_with(core: CoreUnderTest, task: str, granted: list[dict[str, str]], **fields: Any) -> str:
    body = core.body(task, **fields)
    body["grants"] = granted
    response = await core.http.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["session_id"])


async def test_a_granted_action_is_performed_once_and_a_second_call_is_refused_grant_used(
    grants: CoreUnderTest,
) -> None:
    """R55: the first call of exactly the granted action runs; the same call again is refused, `grant_used`."""
    task = scripted_task("Mail the Q3 report to Anna", steps=3, tool_calls=[send(1, ANNA), send(2, ANNA)], **QUICK)
    session_id = await create_with(grants, task, [grant(f"send_mail to {ANNA}")])

    final = await grants.settled(session_id)

    assert final.status is SessionStatus.COMPLETED
    assert [(action.tool, action.whom) for action in final.actions] == [("send_mail", ANNA)]
    (refusal,) = final.refusals
    assert "grant_used" in refusal and ANNA in refusal


async def test_a_grant_covers_exactly_its_action_not_more_recipients_or_fewer(grants: CoreUnderTest) -> None:
    """R55: a grant of a mail to Anna does not let a mail go to Anna and Bob, nor to Bob; the boundary still rules."""
    calls = [send(1, f"{ANNA}, {BOB}"), send(2, BOB), send(3, ANNA)]
    task = scripted_task("Mail the Q3 report", steps=4, tool_calls=calls, **QUICK)
    session_id = await create_with(grants, task, [grant(f"send_mail to {ANNA}")])

    final = await grants.settled(session_id)

    assert [(action.tool, action.whom) for action in final.actions] == [("send_mail", ANNA)]
    assert len(final.refusals) == 2 and not any("grant_used" in refusal for refusal in final.refusals)


async def test_one_grant_is_performed_once_across_every_session_that_carries_it(grants: CoreUnderTest) -> None:
    """R55: a second session carrying the same grant id (a runtime that lost the first) cannot perform it again."""
    granted = [grant(f"Send mail to {ANNA.upper()}")]
    first = await create_with(grants, scripted_task("Mail Anna", steps=2, tool_calls=[send(1, ANNA)], **QUICK), granted)
    done = await grants.settled(first)
    second = await create_with(
        grants, scripted_task("Mail Anna again", steps=2, tool_calls=[send(1, ANNA)], **QUICK), granted
    )
    again = await grants.settled(second)

    assert [action.whom for action in done.actions] == [ANNA]
    assert again.actions == [] and len(again.refusals) == 1 and "grant_used" in again.refusals[0]


async def test_a_grant_whose_digest_is_not_its_actions_is_refused(grants: CoreUnderTest) -> None:
    """R55: a grant bound to another action's digest is refused at create, and nothing starts."""
    wrong = {**grant(f"send_mail to {ANNA}"), "digest": action_digest(parse_item(f"send_mail to {BOB}"))}
    body = grants.body(scripted_task("Mail Anna", steps=1, **QUICK))
    body["grants"] = [wrong]
    response = await grants.http.post("/v1/sessions", json=body)
    assert response.status_code == 422
    assert "digest" in check_problem(response).message
