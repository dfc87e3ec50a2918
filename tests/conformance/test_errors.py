"""Bad requests: a 4xx Problem {code, message} whose message names the field, and nothing changes (R5)."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.core_api import SessionStatus
from reference.core.script import scripted_task
from tests.conformance.contract import CoreUnderTest, check_problem, unique

QUICK = {"step_ms": 5, "input_tokens": 1000, "input_growth": 500}


def _without(body: dict[str, Any], field: str) -> dict[str, Any]:
    return {name: value for name, value in body.items() if name != field}


# (change to a good body, the field the message must name)
BAD_BODIES = [
    pytest.param(lambda b: {**b, "model": "gpt-imaginary"}, "model", id="unknown-model"),
    pytest.param(lambda b: {**b, "language": "xx"}, "language", id="unsupported-language"),
    pytest.param(lambda b: {**b, "limits": {"max_steps": 0, "max_input_tokens": 10}}, "max_steps", id="limits"),
    pytest.param(lambda b: {**b, "limits": {"max_steps": 5}}, "max_input_tokens", id="limit-missing"),
    pytest.param(lambda b: _without(b, "task"), "task", id="missing-task"),
    pytest.param(lambda b: {**b, "task": ""}, "task", id="empty-task"),
    pytest.param(lambda b: {**b, "owner": ""}, "owner", id="empty-owner"),
    pytest.param(lambda b: {**b, "boundary": "send_mail"}, "boundary", id="boundary-not-a-list"),
    pytest.param(lambda b: {**b, "idempotency_key": ""}, "idempotency_key", id="empty-key"),
    pytest.param(lambda b: {**b, "priority": "high"}, "priority", id="unknown-field"),
]


@pytest.mark.parametrize(("spoil", "named"), BAD_BODIES)
async def test_a_bad_create_is_a_problem_naming_the_field_and_creates_nothing(
    core: CoreUnderTest, spoil: Any, named: str
) -> None:
    """R5 (core side): a malformed create is a 4xx Problem naming the field; nothing is created under its key."""
    good = core.body(scripted_task("Good after bad", steps=1, **QUICK))
    bad = spoil(good)
    if bad.get("idempotency_key") == "":
        good = {**good, "idempotency_key": unique("key-after-empty")}

    refused = await core.http.post("/v1/sessions", json=bad)

    problem = check_problem(refused)
    assert named in problem.message, problem
    created = await core.http.post("/v1/sessions", json=good)
    assert created.status_code == 201 and created.json()["created"] is True, created.text


async def test_a_bad_create_with_an_existing_key_changes_nothing(core: CoreUnderTest) -> None:
    """R5, R9: an invalid request reusing a session's key neither changes nor hands out that session."""
    good = core.body(scripted_task("Existing", steps=2, **QUICK))
    session_id = (await core.http.post("/v1/sessions", json=good)).json()["session_id"]
    before = await core.settled(session_id)

    refused = await core.http.post("/v1/sessions", json={**good, "limits": {"max_steps": -1, "max_input_tokens": 1}})

    check_problem(refused)
    assert session_id not in refused.text
    assert await core.snapshot(session_id) == before
    assert before.status is SessionStatus.COMPLETED


@pytest.mark.parametrize(
    "content", [b"{not json", b'{"task": "\xff"}', b"[]", b""], ids=["not-json", "not-utf8", "array", "empty"]
)
async def test_a_body_that_is_not_a_session_request_is_a_problem(core: CoreUnderTest, content: bytes) -> None:
    """R5 (core side): even an unparsable body answers with a 4xx Problem, not an HTML page or a 500."""
    refused = await core.http.post("/v1/sessions", content=content, headers={"content-type": "application/json"})
    check_problem(refused)
