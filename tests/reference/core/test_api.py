"""The session API's shape: idempotent create, Problems for bad requests, 404s, health and OpenAPI."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from contracts.core_api import Problem, SessionCreated
from reference.core.script import scripted_task
from tests.reference.core.support import FAST, session_body


async def test_create_with_the_same_key_returns_the_same_session(client: httpx.AsyncClient) -> None:
    """R9: the same idempotency key names one session; a retried create never makes a second."""
    body = session_body(scripted_task("Idempotent create", **FAST), key="key-idempotent")
    first = await client.post("/v1/sessions", json=body)
    again = await client.post("/v1/sessions", json=body)
    other = await client.post("/v1/sessions", json={**body, "idempotency_key": "key-idempotent-other"})

    assert first.status_code == 201
    assert SessionCreated.model_validate(first.json()).created is True
    assert again.status_code == 200
    assert again.json() == {"session_id": first.json()["session_id"], "created": False}
    assert other.status_code == 201
    assert other.json()["session_id"] != first.json()["session_id"]


async def test_a_key_of_another_owner_is_refused(client: httpx.AsyncClient) -> None:
    """R34, R9: a key never hands one owner's session to another owner."""
    body = session_body(scripted_task("Owner's key", **FAST), key="key-of-ada", owner="ada")
    assert (await client.post("/v1/sessions", json=body)).status_code == 201

    stolen = await client.post("/v1/sessions", json={**body, "owner": "bob"})

    assert stolen.status_code == 409
    assert Problem.model_validate(stolen.json()).code == "idempotency_key_conflict"


def _without(field: str) -> dict[str, Any]:
    body = session_body("task")
    del body[field]
    return body


BAD_REQUESTS = [
    pytest.param(session_body("task", model="gpt-imaginary"), 400, "unknown_model", "model", id="unknown-model"),
    pytest.param(session_body("task", language="de"), 400, "unsupported_language", "language", id="language"),
    pytest.param(
        session_body(scripted_task("task") + '```helper-script\n{"bogus": 1}\n```'),
        400,
        "invalid_script",
        "script",
        id="two-script-blocks",
    ),
    pytest.param(
        session_body('task\n```helper-script\n{"steps": -1}\n```'),
        400,
        "invalid_script",
        "script.steps",
        id="bad-script-field",
    ),
    pytest.param(
        session_body('task\n```helper-script\n{"end": "explode"}\n```'),
        400,
        "invalid_script",
        "script.end",
        id="bad-script-end",
    ),
    pytest.param(
        session_body("task\n```helper-script\n{not json}\n```"), 400, "invalid_script", "JSON", id="script-json"
    ),
    pytest.param(
        {**session_body("task"), "limits": {"max_steps": 0, "max_input_tokens": 10}},
        422,
        "invalid_request",
        "limits.max_steps",
        id="limits-out-of-range",
    ),
    pytest.param(_without("task"), 422, "invalid_request", "task is missing", id="missing-task"),
    pytest.param(session_body(""), 422, "invalid_request", "task", id="empty-task"),
    pytest.param({**session_body("task"), "priority": "high"}, 422, "invalid_request", "priority", id="unknown-field"),
]


@pytest.mark.parametrize(("body", "status", "code", "named"), BAD_REQUESTS)
async def test_a_bad_create_is_a_problem_naming_the_field_and_creates_nothing(
    client: httpx.AsyncClient, body: dict[str, Any], status: int, code: str, named: str
) -> None:
    """R5 (core side): a malformed create gets a 4xx Problem naming what is wrong and writes nothing."""
    key = body.get("idempotency_key", "key-bad-request")
    body = {**body, "idempotency_key": key}

    refused = await client.post("/v1/sessions", json=body)

    assert refused.status_code == status, refused.text
    problem = Problem.model_validate(refused.json())
    assert problem.code == code
    assert named in problem.message
    # Nothing was created under the key: a good request with it now creates the first session.
    good = await client.post("/v1/sessions", json=session_body(scripted_task("Now good", **FAST), key=key))
    assert good.status_code == 201
    assert good.json()["created"] is True


async def test_a_body_that_is_not_json_is_a_problem(client: httpx.AsyncClient) -> None:
    """R5 (core side): even an unparsable body answers with a Problem, not an HTML page."""
    for content in (b"{not json", b'{"task": "\xff"}'):
        refused = await client.post("/v1/sessions", content=content, headers={"content-type": "application/json"})
        assert 400 <= refused.status_code < 500
        assert Problem.model_validate(refused.json()).message


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/sessions/s-unknown"),
        ("POST", "/v1/sessions/s-unknown/finish"),
        ("POST", "/v1/sessions/s-unknown/cancel"),
        ("POST", "/v1/sessions/s-unknown/reset"),
    ],
)
async def test_an_unknown_session_is_a_404_problem(client: httpx.AsyncClient, method: str, path: str) -> None:
    """R24: a session the core does not know answers 404 session_not_found (the runtime's 'lost')."""
    response = await client.request(method, path)

    assert response.status_code == 404
    problem = Problem.model_validate(response.json())
    assert problem.code == "session_not_found"
    assert "s-unknown" in problem.message


async def test_health_openapi_and_unknown_routes(client: httpx.AsyncClient) -> None:
    """The core says it is up, publishes its contract, and answers unknown routes with a Problem."""
    assert (await client.get("/healthz")).json() == {"ok": True}
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert set(paths) >= {
        "/v1/sessions",
        "/v1/sessions/{session_id}",
        "/v1/sessions/{session_id}/finish",
        "/v1/sessions/{session_id}/cancel",
        "/v1/sessions/{session_id}/reset",
        "/healthz",
    }
    missing = await client.get("/v1/nowhere")
    assert missing.status_code == 404
    assert Problem.model_validate(missing.json()).code == "not_found"
