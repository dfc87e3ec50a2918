"""R47, R42, R40, R34: the HTTP service keeps the console script's contract. The same invalid input gets the same
JSON error from both; exit codes become statuses; a caller without the service token reads and changes nothing;
the service refuses to listen beyond loopback without a token; bodies are bounded; the checked-in OpenAPI document
is the app's. These run on a real SQLite store, with no Temporal (writes are refused or unavailable)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from config.settings import ServiceSettings, Settings
from contracts.core_api import QuestionChoices, QuestionOption
from contracts.openapi import render
from domain.outcome import OutcomeKind
from domain.rows import RowState
from domain.work import Usage
from starter.service.openapi import DOCS_COPY, openapi_document
from store.helper_store import HelperStore, RowChanges
from tests.helpers import admitted_row, free_port, service_client

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "s3cret-token-for-the-tests"
NOWHERE = "127.0.0.1:9"  # nothing listens: a write finds Temporal unavailable


@pytest.fixture
async def settings(tmp_path: Path) -> Settings:
    store_url = f"sqlite+aiosqlite:///{tmp_path / 'helpers.sqlite3'}"
    store = await HelperStore.connect(store_url, run_migrations=True)
    await store.close()
    return Settings(
        store=store_url, results_dir=tmp_path / "results", temporal_address=NOWHERE, starter_timeout_ms=3_000
    )


@pytest.fixture
def cli_env(settings: Settings) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("HELPER_", "TEMPORAL_"))},
        "HELPER_STORE_URL": settings.store.text,
        "HELPER_RESULTS_DIR": str(settings.results_dir),
        "TEMPORAL_ADDRESS": NOWHERE,
        "HELPER_STARTER_TIMEOUT_MS": "3000",
        "HELPER_ENV_FILE": os.devnull,
    }


async def _client(settings: Settings, **service: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with service_client(settings.model_copy(update={"service": ServiceSettings(**service)})) as client:
        yield client


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async for client in _client(settings):
        yield client


@pytest.fixture
async def guarded_api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async for client in _client(settings, token=TOKEN, max_body_bytes=4096):
        yield client


def _cli(argv: list[str], env: dict[str, str]) -> tuple[int, dict[str, Any]]:
    done = subprocess.run([sys.executable, "-m", "starter", *argv], cwd=ROOT, env=env, capture_output=True, timeout=60)
    return done.returncode, json.loads(done.stdout)


# The same request through the console script and through the service: (argv, method, path, body, status).
SAME_AS_CLI = [
    (["list", "--owner=_anna"], "GET", "/v1/owners/_anna/helpers", None, 422),
    (["show", "--owner", "anna", "--id=-dash"], "GET", "/v1/owners/anna/helpers/-dash", None, 422),
    (["show", "--owner", "anna", "--id", "nobody"], "GET", "/v1/owners/anna/helpers/nobody", None, 404),
    (
        ["start", "--owner", "anna", "--id", "h1", "--model", "scripted", "--task", "   ", "--language", "de"],
        "POST",
        "/v1/owners/anna/helpers",
        {"helper_id": "h1", "model": "scripted", "task": "   ", "language": "de"},
        422,
    ),
    (
        ["read", "--owner", "anna", "--turn", "t\x01", "h1"],
        "POST",
        "/v1/owners/anna/read",
        {"turn": "t\x01", "helper_ids": ["h1"]},
        422,
    ),
    (
        ["delivered", "--owner", "anna", "--turn", "t-1", "--answer-chars", "0"],
        "POST",
        "/v1/owners/anna/delivered",
        {"turn": "t-1", "answer_chars": 0},
        422,
    ),
    (
        ["goal", "add", "--owner", "anna", "--goal", "inbox", "--every", "1s", "--model", "scripted", "--task", "x"],
        "POST",
        "/v1/owners/anna/goals",
        {"goal_id": "inbox", "every": "1s", "model": "scripted", "task": "x"},
        422,
    ),
]


@pytest.mark.parametrize(("argv", "method", "path", "body", "status"), SAME_AS_CLI, ids=lambda v: str(v)[:30])
async def test_the_service_answers_as_the_console_script(
    api: httpx.AsyncClient,
    cli_env: dict[str, str],
    argv: list[str],
    method: str,
    path: str,
    body: dict[str, Any] | None,
    status: int,
) -> None:
    """The same input gets the same error object (code, message, problems) and its exit code's status."""
    exit_code, printed = _cli(argv, cli_env)
    answered = await api.request(method, path, json=body)
    assert answered.status_code == status
    assert {404: 1, 422: 2}[status] == exit_code
    assert answered.json() == printed


async def test_reads_answer_from_the_store_without_temporal(api: httpx.AsyncClient) -> None:
    for path in ("/v1/owners/anna/helpers", "/v1/owners/anna/unreported", "/v1/owners/anna/helpers?state=running"):
        answered = await api.get(path)
        assert answered.status_code == 200 and answered.json() == []
    usage = await api.get("/v1/owners/anna/usage")
    assert usage.status_code == 200 and usage.json() == {"owner": "anna", "helpers": [], "by_model": []}
    ready = await api.get("/readyz")
    assert ready.status_code == 200 and ready.json()["ok"] is True


REACH_TEMPORAL = (
    f"nothing was taken: Temporal is not reachable at {NOWHERE}. Try again once it answers there (is it running, and "
    "does TEMPORAL_ADDRESS name it?); asking again is safe"
)


async def test_a_write_without_temporal_is_unavailable_and_safe_to_repeat(
    api: httpx.AsyncClient, cli_env: dict[str, str]
) -> None:
    """The message says where Temporal was looked for and what to do; the transport's own words are the `cause`,
    the same from the service and the console script."""
    answered = await api.post("/v1/owners/anna/helpers/h1/close")
    assert answered.status_code == 503
    assert answered.headers["retry-after"] == "1"
    error = answered.json()["error"]
    assert (error["code"], error["message"]) == ("unavailable", REACH_TEMPORAL)
    assert "Connection refused" in error["cause"] and "Connection refused" not in error["message"]
    exit_code, printed = _cli(["close", "--owner", "anna", "--id", "h1"], cli_env)
    assert exit_code == 3 and printed["error"]["message"] == REACH_TEMPORAL
    assert "Connection refused" in printed["error"]["cause"]


async def test_a_store_that_does_not_open_says_what_to_check_and_keeps_the_drivers_words(tmp_path: Path) -> None:
    store = "postgresql+asyncpg://anna:pw-never-shown@127.0.0.1:9/helpers"
    down = Settings(store=store, results_dir=tmp_path / "results", temporal_address=NOWHERE)
    async with service_client(down) as client:
        answered = await client.get("/v1/owners/anna/helpers")
    assert answered.status_code == 503
    error = answered.json()["error"]
    assert error["message"] == (
        "the store at postgresql+asyncpg://127.0.0.1:9/helpers cannot be opened: nothing was read or written. Try "
        "again once it answers there (is it running, and does HELPER_STORE_URL name it with its credentials?)"
    )
    assert "Connect call failed" in error["cause"] and "pw-never-shown" not in answered.text


@pytest.mark.parametrize(
    ("method", "path", "problems"),
    [
        ("GET", "/v1/owners/a%20b/helpers", ["owner: owner 'a b'"]),
        ("GET", "/v1/owners/anna/helpers/-dash", ["helper_id: helper id '-dash'"]),
        ("POST", "/v1/owners/_anna/helpers/-dash/close", ["owner: owner '_anna'", "helper_id: helper id '-dash'"]),
        ("GET", "/v1/owners/anna/helpers/a~b/watch", ["helper_id: helper id 'a~b'"]),
        ("POST", "/v1/owners/anna/goals/in%20box/pause", ["goal_id: goal id 'in box'"]),
        ("DELETE", f"/v1/owners/anna/goals/{'g' * 41}", ["goal_id: goal id is 41 characters; at most 40"]),
    ],
)
async def test_a_path_parameter_that_is_not_valid_is_named_in_the_problems(
    api: httpx.AsyncClient, method: str, path: str, problems: list[str]
) -> None:
    """docs/api.md: every invalid_request carries `problems`; a bad id in the path is one, naming its parameter."""
    answered = await api.request(method, path)
    assert answered.status_code == 422
    error = answered.json()["error"]
    assert error["code"] == "invalid_request"
    assert len(error["problems"]) == len(problems), error
    for problem, starts in zip(error["problems"], problems, strict=True):
        assert problem.startswith(starts), error
    assert error["message"] == "; ".join(error["problems"])


async def test_a_body_that_is_not_json_is_400_and_an_unknown_field_422(api: httpx.AsyncClient) -> None:
    headers = {"content-type": "application/json"}
    answered = await api.post("/v1/owners/anna/read", content=b"{not json", headers=headers)
    assert answered.status_code == 400 and answered.json()["error"]["code"] == "invalid_request"
    answered = await api.post("/v1/owners/anna/read", json={"turn": "t", "helper_ids": ["h"], "owner": "boris"})
    assert answered.status_code == 422
    assert answered.json()["error"]["problems"] == ["owner: Extra inputs are not permitted"]


@pytest.mark.parametrize(
    ("headers", "content", "problem"),
    [
        ({}, b'{"turn": "t", "helper_ids": ["h"]}', "body: sent without a Content-Type, so it is not read as JSON"),
        (
            {"content-type": "text/plain"},
            b'{"turn": "t", "helper_ids": ["h"]}',
            "body: sent as Content-Type 'text/plain', so it is not read as JSON",
        ),
        (
            {"content-type": "application/x-www-form-urlencoded"},
            b"turn=t&helper_ids=h",
            "body: sent as Content-Type 'application/x-www-form-urlencoded', so it is not read as JSON",
        ),
        ({}, b"", "body: missing"),
        ({"content-type": "application/json"}, b"[1, 2]", "body: not a JSON object"),
    ],
)
async def test_a_body_not_sent_as_json_is_refused_naming_its_content_type(
    api: httpx.AsyncClient, headers: dict[str, str], content: bytes, problem: str
) -> None:
    """A body is read as JSON only with a JSON Content-Type: any other is the service's own invalid_request (422, as
    every body that does not pass the checks), naming what came and what is expected."""
    answered = await api.post("/v1/owners/anna/read", content=content, headers=headers)
    assert answered.status_code == 422
    expected = f"{problem}; send a JSON object with Content-Type: application/json"
    assert answered.json() == {"error": {"code": "invalid_request", "message": expected, "problems": [expected]}}
    for charset in ("application/json; charset=utf-8", "application/merge-patch+json"):  # JSON all the same
        answered = await api.post("/v1/owners/anna/read", content=b'{"turn": "t"}', headers={"content-type": charset})
        assert answered.json()["error"]["problems"] == ["helper_ids: Field required"]


async def test_a_caller_without_the_token_reads_and_changes_nothing(guarded_api: httpx.AsyncClient) -> None:
    """R34, R47: 401 before anything is read, validated or written."""
    start = {"helper_id": "h1", "model": "scripted", "task": "Find the Q3 report"}
    for headers in ({}, {"authorization": "Bearer wrong-token-of-the-same-kind"}, {"authorization": TOKEN}):
        for method, path, body in (
            ("GET", "/v1/owners/anna/helpers", None),
            ("GET", "/v1/owners/anna/unreported", None),
            ("GET", "/v1/owners/anna/watch?once=true", None),
            ("POST", "/v1/owners/anna/helpers", start),
            ("POST", "/v1/owners/anna/helpers", {"not": "valid"}),
            ("POST", "/v1/owners/anna/delivered", {"turn": "t", "answer_chars": 3}),
        ):
            answered = await guarded_api.request(method, path, json=body, headers=headers)
            assert answered.status_code == 401, (method, path, headers)
            assert answered.headers["www-authenticate"] == "Bearer"
            assert answered.json()["error"]["code"] == "unauthorized"
    bearer = {"authorization": f"Bearer {TOKEN}"}
    listed = await guarded_api.get("/v1/owners/anna/helpers", headers=bearer)
    assert listed.status_code == 200 and listed.json() == []
    assert (await guarded_api.get("/livez")).status_code == 200  # probes need no token


async def test_a_body_over_the_cap_is_refused_before_it_is_read_whole(guarded_api: httpx.AsyncClient) -> None:
    bearer = {"authorization": f"Bearer {TOKEN}"}
    task = "x" * 5000
    body = {"helper_id": "h1", "model": "scripted", "task": task}
    answered = await guarded_api.post("/v1/owners/anna/helpers", json=body, headers=bearer)
    assert answered.status_code == 413 and answered.json()["error"]["code"] == "too_large"


async def test_metrics_count_requests_by_route_template_never_by_owner(api: httpx.AsyncClient) -> None:
    await api.get("/v1/owners/zoe-metrics/helpers")
    text = (await api.get("/metrics")).text
    assert 'route="/v1/owners/{owner}/helpers"' in text
    assert "zoe-metrics" not in text


def service_from(env: dict[str, str]) -> ServiceSettings:
    return Settings.from_env(env).service


def test_off_loopback_without_a_token_is_refused_naming_the_variable() -> None:
    assert "HELPER_API_TOKEN" in str(service_from({"HELPER_API_BIND": "0.0.0.0:8340"}).problem())
    assert "HELPER_API_TOKEN is too short" in str(service_from({"HELPER_API_TOKEN": "short"}).problem())
    assert "HELPER_API_TLS_KEY" in str(service_from({"HELPER_API_TLS_CERT": "/etc/hostname"}).problem())
    safe = service_from({"HELPER_API_BIND": "0.0.0.0:8340", "HELPER_API_TOKEN": TOKEN})
    assert safe.problem() is None and safe.port == 8340
    assert service_from({}).bind == "127.0.0.1:8340" and service_from({}).problem() is None
    assert service_from({"HELPER_API_TOKEN": "  "}).token is None  # blank is not set


def test_serve_refuses_to_start_off_loopback_without_a_token(cli_env: dict[str, str]) -> None:
    exit_code, printed = _cli(["serve", "--bind", "0.0.0.0:18399"], cli_env)
    assert exit_code == 2
    assert printed["error"]["code"] == "invalid_configuration"
    assert "HELPER_API_TOKEN" in printed["error"]["message"]


def test_the_checked_in_openapi_document_is_the_apps() -> None:
    """docs/api/openapi.json is regenerated by `python -m starter.service.openapi > docs/api/openapi.json`."""
    assert DOCS_COPY.read_text(encoding="utf-8") == render(openapi_document()), (
        "docs/api/openapi.json is stale: run python -m starter.service.openapi > docs/api/openapi.json"
    )


async def test_a_watch_once_of_an_unknown_helper_is_404_before_the_stream(api: httpx.AsyncClient) -> None:
    answered = await api.get("/v1/owners/anna/helpers/nobody/watch", params={"once": "true"})
    assert answered.status_code == 404
    assert answered.json()["error"] == {"code": "unknown_helper", "message": "There is no helper nobody."}
    streamed = await api.get("/v1/owners/anna/watch", params={"once": "true"})
    assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("text/event-stream")
    assert streamed.text.strip().splitlines() == [
        "retry: 1000",
        "",
        "event: end",
        'data: {"reason": "once", "outcome_kind": null}',
    ]


async def test_a_questions_choices_read_the_same_through_the_service_and_the_watch_line_carries_them(
    api: httpx.AsyncClient, settings: Settings, cli_env: dict[str, str]
) -> None:
    """R49: show, list and unreported answer a question outcome's choices as the console script prints them, one
    object; the watch's line of that outcome carries the same object and the lines under it name the options."""
    choices = QuestionChoices(
        question_id="venue",
        options=[QuestionOption(id="hall-a", label="Hall A"), QuestionOption(id="roof", label="The roof")],
        free_text=True,
    )
    store = await HelperStore.connect(settings.store)
    try:
        now = datetime.now(UTC)
        asked = admitted_row(
            "anna",
            "venue",
            at=now,
            result_dir=settings.results_dir / "anna" / "venue.1",
            state=RowState.RUNNING,
            task="Pick a venue",
            generation=2,
        )
        await store.insert_admitted(asked)
        outcome: RowChanges = {
            "state": RowState.UNREPORTED,
            "outcome_kind": OutcomeKind.QUESTION,
            "finished_at": now,
            "summary": "Which venue?",
            "choices": choices,
        }
        assert await store.write_outcome(asked, 3, Usage(), **outcome)
    finally:
        await store.close()
    expected = choices.model_dump(mode="json")
    for argv, path in (
        (["show", "--owner", "anna", "--id", "venue"], "/v1/owners/anna/helpers/venue"),
        (["list", "--owner", "anna"], "/v1/owners/anna/helpers"),
        (["unreported", "--owner", "anna"], "/v1/owners/anna/unreported"),
    ):
        exit_code, printed = _cli(argv, cli_env)
        answered = await api.get(path)
        assert exit_code == 0 and answered.status_code == 200 and answered.json() == printed, argv
        body = printed if isinstance(printed, dict) else printed[0]
        assert body["choices"] == expected, argv
    streamed = await api.get("/v1/owners/anna/watch", params={"once": "true"})
    lines = [
        json.loads(line.removeprefix("data: "))
        for before, line in itertools.pairwise(streamed.text.splitlines())
        if before == "event: line"
    ]
    assert [(line["text"], line["choices"]) for line in lines] == [
        ("unreported · outcome question: Which venue?", expected),
        ("  option hall-a · Hall A", None),
        ("  option roof · The roof", None),
        ("  or an answer in the owner's own words", None),
    ]


def test_sigterm_ends_the_live_lines_streams_and_the_service(settings: Settings, cli_env: dict[str, str]) -> None:
    """A stopping service ends every stream with `event: end` (reason shutdown) and exits 0 within its grace."""
    port = free_port()
    env = {**cli_env, "HELPER_API_SHUTDOWN_GRACE_MS": "5000"}
    service = subprocess.Popen(
        [sys.executable, "-m", "starter", "serve", "--bind", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if client.get("/livez").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert service.poll() is None and time.monotonic() < deadline, "the service did not start"
                time.sleep(0.1)
            with client.stream("GET", "/v1/owners/anna/watch") as stream:
                assert stream.status_code == 200
                service.send_signal(signal.SIGTERM)
                received = "".join(stream.iter_text())
        assert service.wait(timeout=30) == 0
    finally:
        service.kill()
    assert received.strip().splitlines()[-2:] == ["event: end", 'data: {"reason": "shutdown", "outcome_kind": null}']
