"""The core client distrusts the core's answers (R37) and never waits longer than HELPER_CHECK_MS (R10).

Each answer a core can give is played by a real HTTP server on loopback (`tests.fakes.answering_server`,
the answer stated as an `httpx.Response`), and the hostile fake core is served by uvicorn.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import httpx
import pytest

from clients.core_client import (
    CORE_ANSWER_MAX_BYTES,
    ERROR_BODY_MAX_BYTES,
    CoreClient,
    CoreError,
    CoreProtocolError,
    CoreRejected,
    CoreUnavailable,
    SessionNotFound,
)
from contracts.core_api import (
    MAX_INPUT_TOKENS_TOTAL,
    MAX_SNAPSHOT_STEPS,
    MAX_STEP_INDEX,
    MAX_STEP_TOKENS,
    CancelAnswer,
    CreateSession,
    QuestionChoices,
    QuestionOption,
    ResetAnswer,
    SessionLimits,
    SessionStatus,
    Snapshot,
)
from tests.fakes.answering_server import serving_answers
from tests.fakes.fake_core import CONTROL_NOISE, FakeCore, FakeSession, serving_fake_core
from tests.helpers import BOUNDED_S, HANG_S, eventually

SESSION = "s-1"
CHECK_MS = 2_000
Handler = Callable[[httpx.Request], httpx.Response] | Callable[[httpx.Request], Coroutine[None, None, httpx.Response]]
Call = Callable[[CoreClient], Awaitable[Any]]

REQUEST = CreateSession(
    idempotency_key="helpers/anna/helper/h/1",
    owner="anna",
    helper_id="h",
    task="Find the Q3 report",
    language="en",
    model="gpt-5",
    limits=SessionLimits(max_steps=80, max_input_tokens=4_000_000),
)


def body(**fields: Any) -> dict[str, Any]:
    """A valid snapshot body for SESSION, with `fields` changed."""
    return {"session_id": SESSION, "status": "running", "steps": [], "input_tokens_total": 0, **fields}


def step(**fields: Any) -> dict[str, Any]:
    return {"index": 1, "input_tokens": 1_000, "cached_input_tokens": 0, "output_tokens": 100, **fields}


async def streamed(data: bytes) -> AsyncIterator[bytes]:
    yield data


def answering(*args: Any, **kwargs: Any) -> Handler:
    return lambda request: httpx.Response(*args, **kwargs)


async def ask(handler: Handler, call: Call = lambda core: core.snapshot(SESSION), check_ms: int = CHECK_MS) -> Any:
    async with serving_answers(handler) as url:
        client = CoreClient(url, check_ms)
        try:
            return await call(client)
        finally:
            await client.aclose()


async def refused_with(
    handler: Handler, call: Call = lambda core: core.snapshot(SESSION), check_ms: int = CHECK_MS
) -> CoreError:
    with pytest.raises(CoreError) as raised:
        await ask(handler, call, check_ms)
    return raised.value


def assert_short_and_clean(error: Exception) -> None:
    message = str(error)
    assert len(message) <= 400, message
    assert not any(ord(c) < 32 or ord(c) == 127 for c in message), repr(message)


# Every kind of answer a core gives, and what the client makes of it.
ANSWERS: list[tuple[str, Handler, type[CoreError]]] = [
    ("html page", answering(200, html="<html><body><h1>502 Bad Gateway</h1></body></html>"), CoreProtocolError),
    ("cut json", answering(200, content=b'{"session_id": "s-1", "status": '), CoreProtocolError),
    ("garbage", answering(200, content=b"\xff" + os.urandom(2048)), CoreProtocolError),
    ("empty body", answering(200, content=b""), CoreProtocolError),
    ("json array", answering(200, json=[body()]), CoreProtocolError),
    ("wrong types", answering(200, json=body(session_id=7, steps="many", input_tokens_total="x")), CoreProtocolError),
    ("missing fields", answering(200, json={"status": "running"}), CoreProtocolError),
    ("unknown status", answering(200, json=body(status="thinking")), CoreProtocolError),
    ("negative count", answering(200, json=body(steps=[step(input_tokens=-5)])), CoreProtocolError),
    ("output 2^64-5", answering(200, json=body(steps=[step(output_tokens=2**64 - 5)])), CoreProtocolError),
    ("input over 1e9", answering(200, json=body(steps=[step(input_tokens=MAX_STEP_TOKENS + 1)])), CoreProtocolError),
    (
        "cached over 1e9",
        answering(200, json=body(steps=[step(cached_input_tokens=MAX_STEP_TOKENS + 1)])),
        CoreProtocolError,
    ),
    ("step index 0", answering(200, json=body(steps=[step(index=0)])), CoreProtocolError),
    ("step index over 1e5", answering(200, json=body(steps=[step(index=MAX_STEP_INDEX + 1)])), CoreProtocolError),
    (
        "10,001 steps",
        answering(200, json=body(steps=[step(index=n) for n in range(1, MAX_SNAPSHOT_STEPS + 2)])),
        CoreProtocolError,
    ),
    ("total 2^64-5", answering(200, json=body(input_tokens_total=2**64 - 5)), CoreProtocolError),
    ("total over 1e12", answering(200, json=body(input_tokens_total=MAX_INPUT_TOKENS_TOTAL + 1)), CoreProtocolError),
    (
        "5,000-digit number",
        answering(
            200, content=b'{"session_id": "s-1", "status": "running", "input_tokens_total": ' + b"9" * 5000 + b"}"
        ),
        CoreProtocolError,
    ),
    (
        "infinite number",
        answering(200, content=b'{"session_id": "s-1", "status": "running", "input_tokens_total": 1e400}'),
        CoreProtocolError,
    ),
    ("deep nesting", answering(200, content=b"[" * 100_000), CoreProtocolError),
    ("lone surrogate", answering(200, content=b'{"session_id": "s-1", "last_message": "\\ud800"}'), CoreProtocolError),
    ("NUL in session id", answering(200, json=body(session_id="s-1\x00")), CoreProtocolError),
    ("overlong session id", answering(200, json=body(session_id="s-1" + "x" * 300)), CoreProtocolError),
    ("another session", answering(200, json=body(session_id="s-9999", status="completed")), CoreProtocolError),
    ("redirect", answering(302, headers={"location": "http://elsewhere.test/"}), CoreProtocolError),
    (
        "broken gzip",
        # Streamed, so httpx does not try to decode it while the answer is stated.
        lambda request: httpx.Response(200, headers={"content-encoding": "gzip"}, content=streamed(b"not gzip at all")),
        CoreProtocolError,
    ),
    ("404", answering(404, json={"code": "session_not_found", "message": "no session s-1"}), SessionNotFound),
    ("409", answering(409, json={"code": "conflict", "message": "key of another helper"}), CoreRejected),
    ("422 html", answering(422, html="<h1>Unprocessable</h1>"), CoreRejected),
    ("500", answering(500, json={"code": "internal", "message": "internal server error"}), CoreUnavailable),
    ("503 html", answering(503, html="<h1>Service Unavailable</h1>"), CoreUnavailable),
]


@pytest.mark.parametrize(("handler", "expected"), [(h, e) for _, h, e in ANSWERS], ids=[n for n, _, _ in ANSWERS])
async def test_each_kind_of_bad_answer_raises_its_error(handler: Handler, expected: type[CoreError]) -> None:
    """R37, R10: not the contract (HTML, broken or deep JSON, wrong types, counters out of range, a bad or
    foreign session id, a redirect, a broken encoding) is a CoreProtocolError, which the follow counts toward
    HELPER_CORE_BAD_ANSWERS; 404 is SessionNotFound, another 4xx CoreRejected, a 5xx CoreUnavailable.
    Every message is short and free of control characters."""
    error = await refused_with(handler)
    assert type(error) is expected
    assert_short_and_clean(error)


async def test_a_transport_error_is_unavailable() -> None:
    """R10: a connection refused, or one closed before the answer, is CoreUnavailable: the core may come back."""
    async with serving_answers(answering(200)) as url:
        pass  # the port is free again: nothing listens there
    client = CoreClient(url, CHECK_MS)
    try:
        with pytest.raises(CoreUnavailable):
            await client.snapshot(SESSION)
    finally:
        await client.aclose()

    async def cut_off() -> AsyncIterator[bytes]:
        yield b'{"session_id": "s-1", '
        raise ConnectionResetError("the core went away")

    error = await refused_with(lambda request: httpx.Response(200, content=cut_off()))
    assert type(error) is CoreUnavailable


async def test_a_snapshot_of_another_session_names_both_ids() -> None:
    """R37: a snapshot whose session_id is not the one asked for (the payroll of bob) is refused, from GET
    and from finish, and the error names both sessions."""
    foreign = answering(200, json=body(session_id="s-9999", status="completed", last_message="the payroll of bob"))
    for call in (lambda core: core.snapshot(SESSION), lambda core: core.finish(SESSION)):
        error = await refused_with(foreign, call)
        assert type(error) is CoreProtocolError
        assert "'s-9999'" in str(error) and "'s-1'" in str(error)
        assert "payroll" not in str(error)


async def test_a_valid_snapshot_of_the_session_asked_for_is_returned() -> None:
    """R11, R37: counters at their bounds, a 5 MB message and 10,000 actions are still a valid answer."""
    actions = [
        {"tool": "send_mail", "whom": f"p{n}@example.com", "what": "sent", "at": "2026-11-29T19:41:57Z"}
        for n in range(10_000)
    ]
    fields = body(
        steps=[
            step(index=index, input_tokens=MAX_STEP_TOKENS, output_tokens=MAX_STEP_TOKENS)
            for index in (MAX_STEP_INDEX - 1, MAX_STEP_INDEX)
        ],
        input_tokens_total=MAX_INPUT_TOKENS_TOTAL,
        last_message="x" * 5_000_000,
        actions=actions,
    )
    snapshot = await ask(answering(200, json=fields))
    assert isinstance(snapshot, Snapshot)
    assert (snapshot.input_tokens_total, len(snapshot.last_message), len(snapshot.actions)) == (
        MAX_INPUT_TOKENS_TOTAL,
        5_000_000,
        10_000,
    )


async def test_control_characters_are_stripped_before_the_answer_is_returned() -> None:
    """R37: NUL and the other control characters in every text of a snapshot are stripped
    before the caller sees it; tabs and newlines stay."""
    noisy = body(
        last_message="first\x00 line\n\tsecond\x1b[0m line\x7f",
        question="Lisbon\x00 or Porto?",
        authorization={"action": "send_mail\x00", "reason": "\x07outside the boundary"},
        refusals=["send_mail to eve\x00"],
        actions=[
            {"tool": "send\x00_mail", "whom": "bob\x01@example.com", "what": "sent\x0b", "at": "2026-11-29T19:41:57Z"}
        ],
        outcome={"kind": "question", "text": "Which\x00 city?", "stop_reason": None},
        error="\x00boom",
    )
    snapshot = await ask(answering(200, json=noisy))
    assert snapshot.last_message == "first line\n\tsecond[0m line"
    assert snapshot.question == "Lisbon or Porto?"
    assert snapshot.authorization is not None
    assert (snapshot.authorization.action, snapshot.authorization.reason) == ("send_mail", "outside the boundary")
    assert snapshot.refusals == ["send_mail to eve"]
    assert [(a.tool, a.whom, a.what) for a in snapshot.actions] == [("send_mail", "bob@example.com", "sent")]
    assert snapshot.outcome is not None and snapshot.outcome.text == "Which city?"
    assert snapshot.error == "boom"


# The body cap.


def snapshot_of_size(size: int) -> bytes:
    """A valid snapshot body of exactly `size` bytes."""
    empty = json.dumps(body(last_message="")).encode()
    return json.dumps(body(last_message="x" * (size - len(empty)))).encode()


async def test_an_answer_up_to_the_cap_is_read_and_one_byte_more_is_refused() -> None:
    """R37: the body is read up to CORE_ANSWER_MAX_BYTES (16 MiB) and no further: at the cap the answer is
    used, one byte beyond it is a CoreProtocolError naming the cap."""
    at_cap = snapshot_of_size(CORE_ANSWER_MAX_BYTES)
    assert len(at_cap) == CORE_ANSWER_MAX_BYTES
    assert len((await ask(answering(200, content=at_cap))).last_message) > CORE_ANSWER_MAX_BYTES - 200

    error = await refused_with(answering(200, content=snapshot_of_size(CORE_ANSWER_MAX_BYTES + 1)))
    assert type(error) is CoreProtocolError
    assert f"answer larger than {CORE_ANSWER_MAX_BYTES} bytes" in str(error)


async def test_an_endless_answer_is_cut_at_the_cap_not_buffered() -> None:
    """R37: a body that never ends (no Content-Length) is read only up to the cap, then dropped."""
    read = 0
    chunk = b"x" * 65_536

    async def endless() -> AsyncIterator[bytes]:
        nonlocal read
        yield b'{"session_id": "s-1", "status": "running", "input_tokens_total": 0, "last_message": "'
        while True:
            read += len(chunk)
            yield chunk
            await asyncio.sleep(0.001)  # paced, so what was produced is about what was read

    error = await refused_with(lambda request: httpx.Response(200, content=endless()))
    assert type(error) is CoreProtocolError
    # A loaded machine may let the body run a chunk or two past the cap before the read stops: bounded, not buffered.
    assert CORE_ANSWER_MAX_BYTES - len(chunk) <= read <= CORE_ANSWER_MAX_BYTES + 4 * len(chunk)


async def test_a_declared_oversized_answer_is_refused_before_reading_it() -> None:
    """R37: a Content-Length beyond the cap is refused at the headers: the client does not wait for a body
    that would come (here: never) and would be too large."""

    async def never_sent() -> AsyncIterator[bytes]:
        yield b"{"
        await asyncio.sleep(HANG_S)

    headers = {"content-length": str(CORE_ANSWER_MAX_BYTES + 1)}
    started = time.monotonic()
    error = await refused_with(
        lambda request: httpx.Response(200, headers=headers, content=never_sent()), check_ms=10_000
    )
    assert type(error) is CoreProtocolError and "answer larger than" in str(error)
    assert time.monotonic() - started < BOUNDED_S


async def test_an_endless_error_page_is_read_only_at_its_start() -> None:
    """R37, R10: of an error answer only the start is read; the error stays what its status says and its
    message quotes at most a short, clean excerpt of the body."""
    read = 0

    async def endless_page() -> AsyncIterator[bytes]:
        nonlocal read
        while True:
            read += 4096
            yield b"<p>\x00overloaded</p>" * 256
            await asyncio.sleep(0.001)  # paced, so what was produced is about what was read

    error = await refused_with(lambda request: httpx.Response(503, content=endless_page()))
    assert type(error) is CoreUnavailable
    assert read <= ERROR_BODY_MAX_BYTES + 8192
    assert_short_and_clean(error)


async def test_a_problem_message_is_cut_short_and_cleaned() -> None:
    """R37: a Problem's message is quoted cut to about 200 characters, without control characters."""
    problem = {"code": "invalid", "message": "model\x00 " + "very long explanation " * 1_000}
    error = await refused_with(answering(400, json=problem), lambda core: core.create(REQUEST))
    assert type(error) is CoreRejected and error.status == 400
    assert str(error).startswith("core refused (400): model very long")
    assert_short_and_clean(error)


# Every call bounded by HELPER_CHECK_MS.

CALLS: dict[str, Call] = {
    "create": lambda core: core.create(REQUEST),
    "snapshot": lambda core: core.snapshot(SESSION),
    "finish": lambda core: core.finish(SESSION),
    "cancel": lambda core: core.cancel(SESSION),
    "reset": lambda core: core.reset(SESSION),
}


@pytest.mark.parametrize("name", CALLS)
async def test_a_slow_answer_is_unavailable_after_check_ms(name: str) -> None:
    """R10: an answer slower than HELPER_CHECK_MS (here 50 ms) is CoreUnavailable after about 50 ms."""

    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(HANG_S)
        return httpx.Response(200, json=body())

    started = time.monotonic()
    error = await refused_with(slow, CALLS[name], check_ms=50)
    assert type(error) is CoreUnavailable and "no answer within 0.05 s" in str(error)
    assert time.monotonic() - started < BOUNDED_S


async def test_a_trickling_answer_is_bounded_as_a_whole() -> None:
    """R10: headers in time and then one byte every 10 ms: the whole call, body included, ends at
    HELPER_CHECK_MS, even though no single read waits that long."""

    async def trickle() -> AsyncIterator[bytes]:
        while True:
            await asyncio.sleep(0.01)
            yield b" "

    started = time.monotonic()
    error = await refused_with(lambda request: httpx.Response(200, content=trickle()), check_ms=100)
    assert type(error) is CoreUnavailable
    assert time.monotonic() - started < BOUNDED_S


async def test_a_session_id_cannot_reach_another_endpoint() -> None:
    """R37: the session id is quoted whole in the path: "/", "?" or ".." in it cannot name another endpoint."""
    paths: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.raw_path.decode())
        return httpx.Response(200, json={"reset": True})

    assert await ask(handler, lambda core: core.reset("../x/reset?y")) == ResetAnswer(reset=True)
    assert paths == ["/v1/sessions/..%2Fx%2Freset%3Fy/reset"]


async def test_valid_answers_of_every_endpoint_are_returned() -> None:
    """R9, R11: the contract's answers pass: create, snapshot, finish, cancel and reset."""
    answers = {
        ("POST", "/v1/sessions"): httpx.Response(201, json={"session_id": SESSION, "created": True}),
        ("GET", "/v1/sessions/s-1"): httpx.Response(200, json=body()),
        ("POST", "/v1/sessions/s-1/finish"): httpx.Response(202, json=body(finish_requested=True)),
        ("POST", "/v1/sessions/s-1/cancel"): httpx.Response(200, json={"stopped": False, "status": "running"}),
        ("POST", "/v1/sessions/s-1/reset"): httpx.Response(200, json={"reset": True}),
    }
    handler: Handler = lambda request: answers[(request.method, request.url.path)]  # noqa: E731
    assert (await ask(handler, CALLS["create"])).session_id == SESSION
    assert (await ask(handler, CALLS["snapshot"])).status is SessionStatus.RUNNING
    assert (await ask(handler, CALLS["finish"])).finish_requested
    assert await ask(handler, CALLS["cancel"]) == CancelAnswer(stopped=False, status=SessionStatus.RUNNING)
    assert await ask(handler, CALLS["reset"]) == ResetAnswer(reset=True)


@pytest.mark.parametrize(
    ("name", "answer"),
    [
        ("create", {"session_id": "s-1\x00", "created": True}),
        ("create", {"session_id": "", "created": True}),
        ("create", {"session_id": "s" * 201, "created": True}),
        ("cancel", {"stopped": "perhaps", "status": "running"}),
        ("cancel", {"stopped": True}),
        ("reset", {"reset": "yes please"}),
    ],
    ids=["create-nul-id", "create-empty-id", "create-overlong-id", "cancel-bad-bool", "cancel-no-status", "reset-bad"],
)
async def test_malformed_create_cancel_and_reset_answers_are_protocol_errors(name: str, answer: Any) -> None:
    """R37: a create answer with an unusable session id, and cancel or reset answers out of shape, are
    CoreProtocolErrors, never a half-read answer."""
    status = 201 if name == "create" else 200
    error = await refused_with(answering(status, json=answer), CALLS[name])
    assert type(error) is CoreProtocolError


# The hostile fake core, in-process: each of its misbehaviours, as the client sees it.


@contextlib.asynccontextmanager
async def fake_core_client(core: FakeCore, check_ms: int = 500) -> AsyncIterator[CoreClient]:
    async with serving_fake_core(core) as url:
        client = CoreClient(url, check_ms)
        try:
            yield client
        finally:
            await client.aclose()


async def fake_with_session(**knobs: Any) -> tuple[FakeCore, FakeSession]:
    core = FakeCore()
    async with fake_core_client(core) as client:
        await client.create(REQUEST)
    session = core.only_session()
    session.add_step(1_000, 100, "found the Q3 report in the finance folder")
    session.question = "Mail it to Bob or to Ann?"
    session.choices = QuestionChoices(
        question_id="whom", options=[QuestionOption(id="bob", label="To Bob"), QuestionOption(id="ann", label="To Ann")]
    )
    for knob, value in knobs.items():
        setattr(core, knob, value)
    return core, session


FAKE_ERRORS = [
    ("html", CoreProtocolError),
    ("bad_json", CoreProtocolError),
    ("wrong_types", CoreProtocolError),
    ("negative", CoreProtocolError),
    ("missing", CoreProtocolError),
    ("hang", CoreUnavailable),
    ("503", CoreUnavailable),
    ("500", CoreUnavailable),
    ("garbage", CoreProtocolError),
    ("oversized_body", CoreProtocolError),
    ("lost", SessionNotFound),
    ("wrong_session", CoreProtocolError),
    ("overflow", CoreProtocolError),
    ("too_many_options", CoreProtocolError),
    ("duplicate_option_ids", CoreProtocolError),
    ("overlong_label", CoreProtocolError),
]


@pytest.mark.parametrize(("misbehaviour", "expected"), FAKE_ERRORS, ids=[m for m, _ in FAKE_ERRORS])
async def test_each_misbehaviour_of_the_fake_core_raises_its_error(
    misbehaviour: str, expected: type[CoreError]
) -> None:
    """R37, R10, R49: the hostile fake core's misbehaviours, as the client reads them: not the contract (also a
    foreign session, an overflowing counter, an oversized body, choices out of bounds) is a CoreProtocolError, a
    hang or a 5xx CoreUnavailable, a forgotten session SessionNotFound."""
    core, session = await fake_with_session(misbehave=misbehaviour)
    # A hang is seen at the bound; the rest answer at once (an oversized body is 16 MiB to read on a shared machine).
    async with fake_core_client(core, check_ms=300 if misbehaviour == "hang" else 5_000) as client:
        with pytest.raises(CoreError) as raised:
            await client.snapshot(session.session_id)
    assert type(raised.value) is expected
    assert_short_and_clean(raised.value)
    assert core.snapshot_calls == 1


@pytest.mark.parametrize("misbehaviour", ["huge_actions", "huge_message", "nul"])
async def test_misbehaviours_within_the_contract_reach_the_caller_cleaned(misbehaviour: str) -> None:
    """R37, R36: 10,000 actions and a 5 MB message are valid answers (bounding them is the caller's job);
    control characters are stripped, so the caller sees exactly the session's own texts."""
    core, session = await fake_with_session(misbehave=misbehaviour)
    async with fake_core_client(core) as client:
        snapshot = await client.snapshot(session.session_id)
    async with serving_fake_core(core) as url, httpx.AsyncClient(base_url=url) as raw:
        sent = (await raw.get(f"/v1/sessions/{session.session_id}")).json()
    assert snapshot.session_id == session.session_id
    if misbehaviour == "huge_actions":
        assert len(snapshot.actions) == core.huge_actions_count == 10_000
    elif misbehaviour == "huge_message":
        assert len(snapshot.last_message) == core.huge_message_chars == 5_000_000
    else:
        assert CONTROL_NOISE in sent["last_message"] and CONTROL_NOISE in sent["question"]
        assert CONTROL_NOISE in sent["choices"]["options"][0]["label"]
        assert (snapshot.last_message, snapshot.question) == (session.last_message, session.question)
        assert snapshot.choices == session.choices


async def test_a_question_id_renamed_at_every_read_is_read_as_each_answer_says() -> None:
    """R49, R37: a core that renames its question at every read sends valid answers; each read carries that
    answer's id, the fake lists them in order, and the session's own choices are unchanged."""
    core, session = await fake_with_session(misbehave="drifting_question_id", misbehave_on={"snapshot"})
    async with fake_core_client(core) as client:
        reads = [await client.snapshot(session.session_id) for _ in range(3)]
    assert [read.choices.question_id for read in reads if read.choices] == core.question_ids_sent
    assert core.question_ids_sent == ["whom~1", "whom~2", "whom~3"]
    assert [option.id for read in reads if read.choices for option in read.choices.options] == ["bob", "ann"] * 3
    assert session.choices is not None and session.choices.question_id == "whom"


async def test_the_fake_core_misbehaves_only_where_told() -> None:
    """R37: with `misbehave_on={"snapshot"}` snapshots are oversized while create, finish and cancel answer
    normally; create misbehaves only when named."""
    core, session = await fake_with_session(misbehave="oversized_body", misbehave_on={"snapshot"})
    async with fake_core_client(core) as client:
        with pytest.raises(CoreProtocolError, match="answer larger than"):
            await client.snapshot(session.session_id)
        assert (await client.create(REQUEST)).created is False
        assert (await client.finish(session.session_id)).status is SessionStatus.PARTIAL
        assert (await client.cancel(session.session_id)).stopped
        core.misbehave_on = {"create"}
        core.misbehave = "500"
        with pytest.raises(CoreUnavailable):
            await client.create(REQUEST)
        assert (await client.snapshot(session.session_id)).status is SessionStatus.PARTIAL
    assert (core.create_calls, core.snapshot_calls, core.finish_calls, core.cancel_calls) == (3, 2, 1, 1)


async def test_a_slow_or_lost_answer_of_the_fake_core_still_does_the_work() -> None:
    """R10, R38: a create answered after HELPER_CHECK_MS, or whose answer is lost, made its session all
    the same: the client sees CoreUnavailable, and the same key names the same session afterwards."""
    core = FakeCore(create_delay_s=5)
    async with fake_core_client(core, check_ms=100) as client:
        with pytest.raises(CoreUnavailable):
            await client.create(REQUEST)
        assert core.by_key == {REQUEST.idempotency_key: "fake-1"}
        core.create_delay_s = 0
        core.lose_next = {"create": 1, "cancel": 1}
        with pytest.raises(CoreUnavailable):
            await client.create(REQUEST)
        again = await client.create(REQUEST)
        assert (again.session_id, again.created, core.create_calls) == ("fake-1", False, 3)
        with pytest.raises(CoreUnavailable):
            await client.cancel("fake-1")
        assert core.sessions["fake-1"].status is SessionStatus.CANCELLED


async def test_a_cleanup_call_may_be_given_its_own_bound() -> None:
    """R10, R38: by default every call ends at HELPER_CHECK_MS; a cleanup without time pressure may give a
    call its own, longer bound (`timeout_s`), and that bound holds as firmly."""

    async def answers_in_200_ms(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0.2)
        return httpx.Response(200, json={"reset": True})

    assert type(await refused_with(answers_in_200_ms, CALLS["reset"], check_ms=50)) is CoreUnavailable
    patient: Call = lambda core: core.reset(SESSION, timeout_s=1.0)  # noqa: E731
    assert await ask(answers_in_200_ms, patient, check_ms=50) == ResetAnswer(reset=True)
    hasty: Call = lambda core: core.reset(SESSION, timeout_s=0.05)  # noqa: E731
    error = await refused_with(answers_in_200_ms, hasty, check_ms=5_000)
    assert type(error) is CoreUnavailable and "no answer within 0.05 s" in str(error)


async def test_a_long_poll_asks_with_the_version_and_is_bounded_by_its_wait_plus_check_ms() -> None:
    """R44, R10: a long-poll read names the version it has and the wait; a core that holds it longer than the
    wait plus HELPER_CHECK_MS is CoreUnavailable then, not later."""
    asked: list[httpx.Request] = []

    async def holds_forever(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        await asyncio.sleep(HANG_S)
        return httpx.Response(200, json=body(version=4))

    started = time.monotonic()
    error = await refused_with(holds_forever, lambda core: core.snapshot(SESSION, after=3, wait_ms=200), check_ms=50)
    elapsed = time.monotonic() - started
    assert type(error) is CoreUnavailable and "no answer within 0.25 s" in str(error)
    assert 0.2 <= elapsed < BOUNDED_S
    assert dict(asked[0].url.params) == {"after": "3", "wait_ms": "200"}


async def test_a_plain_read_sends_no_long_poll_parameters() -> None:
    """R44: without a version (a core that never sent one) the read is a plain GET, bounded by check_ms."""
    asked: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        return httpx.Response(200, json=body())

    snapshot = await ask(answer, lambda core: core.snapshot(SESSION, after=None, wait_ms=20_000))
    assert snapshot.version is None and not asked[0].url.params


@pytest.mark.parametrize("version", [-1, 2**53 + 1, "seven", 1.5])
async def test_an_absurd_version_is_a_protocol_error(version: Any) -> None:
    """R37, R44: a version out of range or not an integer is not the contract."""
    error = await refused_with(answering(200, json=body(version=version)))
    assert type(error) is CoreProtocolError and "version" in str(error)


async def test_hundreds_of_long_polls_at_once_do_not_wait_for_each_other() -> None:
    """R44, R46, R10: a client sized to the worker's activity slots (here 250) holds as many long polls at once;
    none waits for a free connection (a pool smaller than the slots, as httpx's default of 100, would hold the
    rest back until a poll ended, and on a core that answers late, time them out as if it were down)."""
    core = FakeCore(long_poll="honest")
    for number in range(250):
        core.sessions[f"s-{number}"] = FakeSession(session_id=f"s-{number}", request=REQUEST)
    async with serving_fake_core(core) as url:
        # Bounds far past the test: a loaded machine is slow to answer 250 polls, and the test times nothing.
        client = CoreClient(url, 30_000, connections=250)
        try:
            versions = [(await client.snapshot(f"s-{n}")).version for n in range(250)]
            polls = asyncio.gather(
                *(client.snapshot(f"s-{n}", after=versions[n], wait_ms=60_000) for n in range(250)),
                return_exceptions=True,
            )
            try:
                await eventually(lambda: core.long_poll_peak == 250, timeout=60)
            finally:
                for session in core.sessions.values():  # a change answers every waiting poll
                    session.add_step(10, 1, "moved on")
                answers = await polls
        finally:
            await client.aclose()
    failures = [answer for answer in answers if isinstance(answer, BaseException)]
    assert not failures, f"{len(failures)} of 250 long polls failed, e.g. {failures[0]!r}"
    changed = [answer for answer in answers if not isinstance(answer, BaseException)]
    assert all(answer.version != versions[n] for n, answer in enumerate(changed))  # each answered with the change
