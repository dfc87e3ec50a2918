"""A programmable, hostile core for workflow tests: it speaks the core's real HTTP contract, but each test
decides what the sessions do (keep running, answer finish-now or not) and how the core misbehaves.

The reference core is the faithful one; this fake exists for what a faithful core never does on cue:
silence, HTML error pages, wrong types, hangs, lost sessions, slow or lost answers to work it did,
snapshots of another session, absurd counters, huge or dirty texts, garbage and endless bodies, a structured
question's choices out of bounds or renamed at every read (R37, R49).

Everything is plain data the test changes between steps (see `FakeCore`). Answers are sent as the test
set them, without validation: a text or a step a test puts into a `FakeSession` is what the client reads.
Serve it with `serving_fake_core`, which also lets it drop connections ("close" lost answers).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse

from clients.core_client import CORE_ANSWER_MAX_BYTES
from contracts.core_api import (
    MAX_OPTION_LABEL_CHARS,
    MAX_QUESTION_OPTIONS,
    Action,
    Authorization,
    CancelAnswer,
    CreateSession,
    QuestionChoices,
    SessionCreated,
    SessionOutcome,
    SessionStatus,
    Snapshot,
    StepUsage,
    StopReason,
)
from reference.core.server import HOST

# The endpoints, as named in `misbehave_on`, the `*_delay_s` and `*_lost` knobs, and `lose_next`.
ENDPOINTS = frozenset({"create", "snapshot", "finish", "cancel", "reset"})
# Where `misbehave` applies when `misbehave_on` is None: every call on an existing session, not create.
DEFAULT_MISBEHAVE_ON = frozenset({"snapshot", "finish", "cancel", "reset"})
# Misbehaviours that answer instead of the endpoint: the core does nothing of what was asked.
INSTEAD_OF_ANSWER = frozenset(
    {"html", "bad_json", "wrong_types", "negative", "missing", "hang"}
    | {"503", "500", "garbage", "oversized_body", "lost"}
)
# Misbehaviours that change an answer carrying a snapshot (snapshot, finish) after the work is done;
# create, cancel and reset answer normally under them.
SNAPSHOT_CHANGES = frozenset(
    {"wrong_session", "overflow", "huge_actions", "huge_message", "nul"}
    | {"too_many_options", "duplicate_option_ids", "overlong_label", "drifting_question_id"}
)
MISBEHAVIOURS = INSTEAD_OF_ANSWER | SNAPSHOT_CHANGES
# An unsigned underflow in a core: 5 tokens short of 2**64.
OVERFLOW_TOKENS = 2**64 - 5
# What "nul" mode puts around and inside texts: NUL, other C0 controls and DEL, all of which the client
# strips, so the text it returns is exactly the session's text.
CONTROL_NOISE = "\x00\x01\x08\x0b\x0c\x1b\x7f"
# The outcome a "wrong_session" answer carries when there is no other session to show.
FOREIGN_OUTCOME = "The payroll of bob: 5,400 EUR, sent to bob@example.com."
_STREAM_CHUNK = 64 * 1024
# The question a choices misbehaviour asks when the session asks none.
FAKE_QUESTION = "Walk or taxi?"


@dataclass
class FakeSession:
    session_id: str
    request: CreateSession
    status: SessionStatus = SessionStatus.RUNNING
    steps: list[StepUsage] = field(default_factory=list)
    last_message: str = ""
    question: str | None = None
    choices: QuestionChoices | None = None
    actions: list[Action] = field(default_factory=list)
    outcome: SessionOutcome | None = None
    finish_requested: bool = False
    cancel_requested: bool = False
    # Sent as they are; None/empty by default, as before.
    authorization: Authorization | None = None
    refusals: list[str] = field(default_factory=list)
    error: str | None = None
    # When the create arrived, on this process's `time.perf_counter()` clock (benches time the way to it).
    created_at: float = field(default_factory=time.perf_counter)

    def add_step(self, input_tokens: int, output_tokens: int, message: str | None = None) -> None:
        self.steps.append(StepUsage(index=len(self.steps) + 1, input_tokens=input_tokens, output_tokens=output_tokens))
        self.last_message = message or f"step {len(self.steps)} done"

    def end(self, status: SessionStatus, text: str | None = None, stop_reason: StopReason | None = None) -> None:
        self.status = status
        self.outcome = SessionOutcome(kind=status, text=text or self.last_message, stop_reason=stop_reason)
        if text:
            self.last_message = text

    def snapshot(self) -> Snapshot:
        """The session as the core shows it, built without validation: what the test set is what is sent."""
        return Snapshot.model_construct(
            session_id=self.session_id,
            status=self.status,
            steps=list(self.steps),
            input_tokens_total=sum(s.input_tokens for s in self.steps),
            last_message=self.last_message,
            question=self.question,
            choices=self.choices,
            authorization=self.authorization,
            actions=list(self.actions),
            refusals=list(self.refusals),
            outcome=self.outcome,
            error=self.error,
            finish_requested=self.finish_requested,
            cancel_requested=self.cancel_requested,
        )

    def body(self) -> dict[str, Any]:
        """The snapshot as the JSON body of an answer."""
        return self.snapshot().model_dump(mode="json")


class DoneAtOnce(dict[str, FakeSession]):
    """A session table whose sessions are created with one step done and their turn completed, so the helper's
    first snapshot is terminal: a quick helper, with no race against the test's own moves. With `helper_ids`,
    only those helpers' sessions; the others run until the test ends them."""

    def __init__(self, helper_ids: Iterable[str] | None = None) -> None:
        super().__init__()
        self.helper_ids = None if helper_ids is None else frozenset(helper_ids)

    def __setitem__(self, session_id: str, session: FakeSession) -> None:
        if self.helper_ids is None or session.request.helper_id in self.helper_ids:
            session.add_step(input_tokens=1_200, output_tokens=300, message="Looked it up.")
            session.end(SessionStatus.COMPLETED, "Done: the answer is 42.")
        super().__setitem__(session_id, session)


@dataclass
class FakeCore:
    """What the sessions do, and how the core misbehaves, is plain data the test changes between steps.

    Sessions and calls:
    - `sessions`, `by_key`: the sessions by id and by idempotency key (a repeated create answers the same
      session with `created: false`, R9). `only_session()`, `session_of(helper_id)` find one.
      `sessions=DoneAtOnce()` makes every session (or those of some helpers) complete at its create.
    - `create_calls`, `snapshot_calls`, `finish_calls`, `cancel_calls`, `reset_calls`: calls per endpoint,
      counted when the call arrives, whether the answer is then normal, misbehaving, slow or lost.

    How the core answers the work it is asked to do:
    - `on_finish`: "partial" ends the session at once (partial, stop_reason finish_now); "ignore" keeps it
      running (only `finish_requested` is set).
    - `on_cancel`: "stop" stops at once (cancelled, `stopped: true`); "later" answers not-yet-stopped.
    - `reset_fails`: every reset answers 503 and keeps the session.
    - `fail_next`: {"reset": 5} answers the next five resets with 503 (doing nothing), then answers come again;
      `fail_every_other`: {"reset", "cancel"} answers every other call of those endpoints with 503, the first
      included (a core that fails half its calls).

    Misbehaviour (`misbehave`, None for a faithful core), on the endpoints in `misbehave_on`:
    - answers instead of the endpoint (the core does nothing of what was asked):
      "html" (a 200 HTML page), "bad_json" (a cut JSON body), "wrong_types" (strings for counts, a number
      for the id), "negative" (negative counts), "missing" (required fields missing), "hang" (no answer
      for an hour, or until the fake stops), "503" and "500" (a Problem with that status), "garbage"
      (`garbage_bytes` random bytes, status 200, not UTF-8), "oversized_body" (a 200 JSON snapshot of
      `oversized_body_bytes`, streamed without Content-Length, larger than the client's cap), "lost"
      (404 session_not_found although the session exists: the core forgot it).
    - changes an answer that carries a snapshot (snapshot, finish) after the work is done; other endpoints
      answer normally: "wrong_session" (a valid snapshot of another session: another existing session's,
      or else a completed one with id `<id>-other` and the outcome `FOREIGN_OUTCOME`), "overflow" (the
      last step's output_tokens is `OVERFLOW_TOKENS` = 2**64 - 5; a step is added if there is none),
      "huge_actions" (`huge_actions_count` valid actions, 10,000 by default), "huge_message" (a last
      message of `huge_message_chars` characters, 5,000,000 by default), "nul" (`CONTROL_NOISE` put
      around and inside last_message, and question, outcome text, authorization, refusals and action
      texts and option labels where present: once stripped, each text is exactly the session's);
      a structured question's choices (R49), with the question `FAKE_QUESTION` when the session asks none:
      "too_many_options" (`MAX_QUESTION_OPTIONS` + 1 options), "duplicate_option_ids" (two options of one id),
      "overlong_label" (a label of `MAX_OPTION_LABEL_CHARS` + 1 characters), all three malformed; and
      "drifting_question_id" (valid: the session's choices, their question id renamed `<id>~<n>` at the n-th
      such answer; the ids sent are listed in `question_ids_sent`, the last one last).
    - `misbehave_on`: the endpoints it applies to ("create", "snapshot", "finish", "cancel", "reset");
      None means `DEFAULT_MISBEHAVE_ON`, every call on a session but not create (as before). For example
      {"snapshot"} gives a huge snapshot to GETs while create, finish and cancel work normally.

    Long poll (R44), `long_poll`:
    - None (default): a core without it: snapshots carry no `version`, `after` and `wait_ms` are ignored.
    - "honest": snapshots carry a `version` (a fingerprint of the session's content) and a read with `after`
      equal to it waits until the session changes (the test changes it) or `wait_ms` has passed.
    - "ignores_wait": versions are sent but every read answers at once: a core that advertises long poll
      and does not do it.
    `long_poll_waits` counts the reads that waited, `long_poll_peak` the most that waited at once.

    Slow and lost answers (the work is done at once in both cases, like a core whose answer is slow or
    lost on the way back, R35/R38):
    - `create_delay_s`, `snapshot_delay_s`, `finish_delay_s`, `cancel_delay_s`, `reset_delay_s`: seconds
      to wait between doing the work and answering (0: at once). The session is created, the finish or
      cancel takes effect, the reset removes the session, and only then does the answer wait.
    - `create_lost`, `snapshot_lost`, `finish_lost`, `cancel_lost`, `reset_lost`: every answer of that
      endpoint is lost (after its delay, if any). `lose_next`: {"create": 2} loses only the next two
      create answers, then answers come again (the count goes down as answers are lost).
    - `lost_answer`: how an answer is lost. "close" (default) closes the connection without any answer,
      which the client sees as a transport error; "hang" never answers (an hour, or until the fake stops).
      "close" needs the fake served by `serving_fake_core`; otherwise the answer hangs.
    """

    sessions: dict[str, FakeSession] = field(default_factory=dict)
    by_key: dict[str, str] = field(default_factory=dict)
    create_calls: int = 0
    finish_calls: int = 0
    cancel_calls: int = 0
    reset_calls: int = 0
    # How finish-now is answered: "partial" ends the session at once; "ignore" keeps it running.
    on_finish: str = "partial"
    # How cancel is answered: "stop" stops at once; "later" answers not-yet-stopped.
    on_cancel: str = "stop"
    # Misbehaviour of the answers (see the class docstring): None, "html", "bad_json", "wrong_types",
    # "negative", "missing", "hang", "503", "500", "garbage", "oversized_body", "lost", "wrong_session",
    # "overflow", "huge_actions", "huge_message", "nul", "too_many_options", "duplicate_option_ids",
    # "overlong_label", "drifting_question_id".
    misbehave: str | None = None
    question_ids_sent: list[str] = field(default_factory=list)  # under "drifting_question_id"
    reset_fails: bool = False
    fail_next: dict[str, int] = field(default_factory=dict)
    fail_every_other: set[str] = field(default_factory=set)
    _calls_seen: dict[str, int] = field(default_factory=dict, repr=False)
    snapshot_calls: int = 0
    # The endpoints `misbehave` applies to; None: every call on a session, not create.
    misbehave_on: set[str] | None = None
    # Slow answers: seconds between doing the work and answering.
    create_delay_s: float = 0.0
    snapshot_delay_s: float = 0.0
    finish_delay_s: float = 0.0
    cancel_delay_s: float = 0.0
    reset_delay_s: float = 0.0
    # Lost answers: the work is done, the answer never arrives.
    create_lost: bool = False
    snapshot_lost: bool = False
    finish_lost: bool = False
    cancel_lost: bool = False
    reset_lost: bool = False
    lose_next: dict[str, int] = field(default_factory=dict)
    # "close": the connection is closed without an answer; "hang": the answer never comes.
    lost_answer: str = "close"
    # Sizes of the hostile answers.
    huge_actions_count: int = 10_000
    huge_message_chars: int = 5_000_000
    oversized_body_bytes: int = CORE_ANSWER_MAX_BYTES + 1024 * 1024
    garbage_bytes: int = 4096
    # The catalog `GET /v1/models` answers; None: no catalog (404), as a core without the endpoint.
    models: list[str] | None = None
    models_delay_s: float = 0.0
    # Long poll: None, "honest" or "ignores_wait" (see the class docstring).
    long_poll: str | None = None
    long_poll_waits: int = 0
    long_poll_peak: int = 0  # the most reads waiting at once
    _long_polls_now: int = field(default=0, repr=False)
    reads_by_session: dict[str, int] = field(default_factory=dict)  # snapshot reads per session id
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _server: uvicorn.Server | None = field(default=None, repr=False)
    _stopping: asyncio.Event | None = field(default=None, repr=False)

    def only_session(self) -> FakeSession:
        assert len(self.sessions) == 1, f"expected one session, have {len(self.sessions)}"
        return next(iter(self.sessions.values()))

    def session_of(self, helper_id: str) -> FakeSession | None:
        return next((s for s in self.sessions.values() if s.request.helper_id == helper_id), None)

    def app(self) -> FastAPI:
        app = FastAPI(title="fake-core")

        @app.get("/v1/models")
        async def models() -> Response:
            await self._pause(self.models_delay_s)
            if self.models is None:
                return JSONResponse({"detail": "Not Found"}, status_code=404)
            return JSONResponse({"models": self.models})

        @app.post("/v1/sessions")
        async def create(body: CreateSession, request: Request) -> Response:
            self.create_calls += 1

            def work(changing: bool) -> Response:
                if body.idempotency_key in self.by_key:
                    created = SessionCreated(session_id=self.by_key[body.idempotency_key], created=False)
                    return JSONResponse(created.model_dump(), status_code=200)
                session_id = f"fake-{next(self._ids)}"
                self.by_key[body.idempotency_key] = session_id
                self.sessions[session_id] = FakeSession(session_id=session_id, request=body)
                return JSONResponse(SessionCreated(session_id=session_id, created=True).model_dump(), status_code=201)

            return await self._answer("create", "", request, work)

        @app.get("/v1/sessions/{session_id}")
        async def snapshot(session_id: str, request: Request) -> Response:
            self.snapshot_calls += 1
            self.reads_by_session[session_id] = self.reads_by_session.get(session_id, 0) + 1
            await self._hold_long_poll(session_id, request)

            def work(changing: bool) -> Response:
                session = self.sessions.get(session_id)
                if session is None:
                    return _not_found()
                body = self._changed(session, changing)
                if self.long_poll is not None:
                    body["version"] = _version(session)
                return JSONResponse(body)

            return await self._answer("snapshot", session_id, request, work)

        @app.post("/v1/sessions/{session_id}/finish")
        async def finish(session_id: str, request: Request) -> Response:
            self.finish_calls += 1

            def work(changing: bool) -> Response:
                session = self.sessions.get(session_id)
                if session is None:
                    return _not_found()
                session.finish_requested = True
                if self.on_finish == "partial" and not session.status.is_terminal:
                    session.end(SessionStatus.PARTIAL, f"partial: {session.last_message}", StopReason.FINISH_NOW)
                return JSONResponse(self._changed(session, changing), status_code=202)

            return await self._answer("finish", session_id, request, work)

        @app.post("/v1/sessions/{session_id}/cancel")
        async def cancel(session_id: str, request: Request) -> Response:
            self.cancel_calls += 1

            def work(changing: bool) -> Response:
                session = self.sessions.get(session_id)
                if session is None:
                    return _not_found()
                session.cancel_requested = True
                if session.status.is_terminal:
                    return JSONResponse(CancelAnswer(stopped=True, status=session.status).model_dump())
                if self.on_cancel == "stop":
                    session.status = SessionStatus.CANCELLED
                    return JSONResponse(CancelAnswer(stopped=True, status=session.status).model_dump())
                return JSONResponse(CancelAnswer(stopped=False, status=session.status).model_dump())

            return await self._answer("cancel", session_id, request, work)

        @app.post("/v1/sessions/{session_id}/reset")
        async def reset(session_id: str, request: Request) -> Response:
            self.reset_calls += 1

            def work(changing: bool) -> Response:
                if self.reset_fails:
                    return JSONResponse({"code": "busy", "message": "reset failed"}, status_code=503)
                if self.sessions.pop(session_id, None) is None:
                    return _not_found()
                return JSONResponse({"reset": True})

            return await self._answer("reset", session_id, request, work)

        return app

    # How an answer is made: misbehaviour instead of the work, or the work (and its answer changed), then
    # the delay, then perhaps the answer is lost.

    def _misbehaves_on(self, endpoint: str) -> bool:
        where = DEFAULT_MISBEHAVE_ON if self.misbehave_on is None else self.misbehave_on
        return self.misbehave is not None and endpoint in where

    async def _answer(
        self, endpoint: str, session_id: str, request: Request, work: Callable[[bool], Response]
    ) -> Response:
        if self._fails(endpoint):
            return JSONResponse({"code": "unavailable", "message": "the core is failing"}, status_code=503)
        misbehaves = self._misbehaves_on(endpoint)
        bad = await self._bad_answer(session_id) if misbehaves else None
        response = bad if bad is not None else work(misbehaves and self.misbehave in SNAPSHOT_CHANGES)
        delay: float = getattr(self, f"{endpoint}_delay_s")
        if delay > 0:
            await self._pause(delay)
        if self._loses(endpoint):
            await self._lose(request)
        return response

    async def _hold_long_poll(self, session_id: str, request: Request) -> None:
        """An honest long poll: wait while the session's version is the caller's `after`, up to `wait_ms`."""
        session = self.sessions.get(session_id)
        if self.long_poll != "honest" or session is None:
            return
        try:
            after = int(request.query_params["after"])
            wait_s = int(request.query_params["wait_ms"]) / 1000
        except (KeyError, ValueError):
            return
        if _version(session) != after:
            return
        self.long_poll_waits += 1
        self._long_polls_now += 1
        self.long_poll_peak = max(self.long_poll_peak, self._long_polls_now)
        deadline = asyncio.get_running_loop().time() + wait_s
        # The tests change sessions as plain data, so a change is seen by looking (every 30 ms), not told; more
        # often, hundreds of waiting reads would keep a slow machine's event loop busy with looking alone.
        try:
            while _version(session) == after and asyncio.get_running_loop().time() < deadline:
                if self._stopping is not None and self._stopping.is_set():
                    return
                await asyncio.sleep(0.03)
        finally:
            self._long_polls_now -= 1

    def _fails(self, endpoint: str) -> bool:
        seen = self._calls_seen[endpoint] = self._calls_seen.get(endpoint, 0) + 1
        left = self.fail_next.get(endpoint, 0)
        if left > 0:
            self.fail_next[endpoint] = left - 1
            return True
        return endpoint in self.fail_every_other and seen % 2 == 1

    def _loses(self, endpoint: str) -> bool:
        left = self.lose_next.get(endpoint, 0)
        if left > 0:
            self.lose_next[endpoint] = left - 1
            return True
        return bool(getattr(self, f"{endpoint}_lost"))

    async def _lose(self, request: Request) -> None:
        """Drop the answer: close the connection without a byte of it, or never answer."""
        if self.lost_answer == "close" and self._close_connection(request):
            # Let the server see the connection gone, so it discards the answer without a word.
            await asyncio.sleep(0.05)
            return
        await self._pause(3600)

    def _close_connection(self, request: Request) -> bool:
        client = request.scope.get("client")
        if self._server is None or client is None:
            return False
        for connection in list(self._server.server_state.connections):
            transport = getattr(connection, "transport", None)
            if getattr(connection, "client", None) == tuple(client) and transport is not None:
                transport.abort()
                return True
        return False

    async def _pause(self, seconds: float) -> None:
        """Sleep, but end early when the fake stops serving, so a stop never waits for a hang."""
        if self._stopping is None:
            await asyncio.sleep(seconds)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    def _changed(self, session: FakeSession, changing: bool) -> dict[str, Any]:
        """The session's snapshot body, changed by a snapshot misbehaviour if one applies to this call."""
        body = session.body()
        if not changing:
            return body
        match self.misbehave:
            case "wrong_session":
                other = next((s for s in self.sessions.values() if s.session_id != session.session_id), None)
                if other is not None:
                    return other.body()
                body.update(
                    session_id=f"{session.session_id}-other",
                    status=SessionStatus.COMPLETED.value,
                    last_message=FOREIGN_OUTCOME,
                    outcome={"kind": SessionStatus.COMPLETED.value, "text": FOREIGN_OUTCOME, "stop_reason": None},
                )
            case "overflow":
                if not body["steps"]:
                    body["steps"].append(StepUsage(index=1, input_tokens=0, output_tokens=0).model_dump(mode="json"))
                body["steps"][-1]["output_tokens"] = OVERFLOW_TOKENS
            case "huge_actions":
                body["actions"] = body["actions"] + list(_many_actions(self.huge_actions_count))
            case "huge_message":
                body["last_message"] = _filler(self.huge_message_chars)
            case "nul":
                _add_noise(body)
            case "too_many_options" | "duplicate_option_ids" | "overlong_label":
                body["question"] = body["question"] or FAKE_QUESTION
                body["choices"] = _bad_choices(self.misbehave, body["choices"])
            case "drifting_question_id" if body["choices"] is not None:
                question_id = f"{body['choices']['question_id']}~{len(self.question_ids_sent) + 1}"
                body["choices"]["question_id"] = question_id
                self.question_ids_sent.append(question_id)
        return body

    async def _bad_answer(self, session_id: str) -> Response | None:
        match self.misbehave:
            case "html":
                return HTMLResponse("<html><body><h1>502 Bad Gateway</h1></body></html>", status_code=200)
            case "bad_json":
                return Response(b'{"session_id": "x", "status": ', media_type="application/json")
            case "wrong_types":
                return JSONResponse({"session_id": 7, "status": "running", "steps": "many", "input_tokens_total": "x"})
            case "negative":
                return JSONResponse(
                    {
                        "session_id": "x",
                        "status": "running",
                        "steps": [{"index": 1, "input_tokens": -5, "output_tokens": 3}],
                        "input_tokens_total": -5,
                    }
                )
            case "missing":
                return JSONResponse({"status": "running"})
            case "hang":
                await self._pause(3600)
            case "503":
                return JSONResponse({"code": "unavailable", "message": "overloaded"}, status_code=503)
            case "500":
                return JSONResponse({"code": "internal", "message": "internal server error"}, status_code=500)
            case "garbage":
                # 0xff never starts UTF-8 or JSON: the body cannot be read as an answer by accident.
                return Response(b"\xff" + os.urandom(self.garbage_bytes), media_type="application/json")
            case "oversized_body":
                return StreamingResponse(_oversized(session_id or "x", self.oversized_body_bytes), 200)
            case "lost":
                return _not_found()
        return None


def _version(session: FakeSession) -> int:
    """A version that changes whenever the session's content does (a fingerprint of its snapshot)."""
    return zlib.crc32(json.dumps(session.body(), sort_keys=True).encode())


def _not_found() -> JSONResponse:
    return JSONResponse({"code": "session_not_found", "message": "no such session"}, status_code=404)


def _bad_choices(misbehaviour: str, choices: dict[str, Any] | None) -> dict[str, Any]:
    """Choices out of the contract's bounds, built on the session's own when it has some."""
    bad = dict(choices or {"question_id": "fake-question", "options": [{"id": "walk", "label": "Walking"}]})
    match misbehaviour:
        case "too_many_options":
            bad["options"] = [{"id": f"o{n}", "label": f"Option {n}"} for n in range(MAX_QUESTION_OPTIONS + 1)]
        case "duplicate_option_ids":
            first = bad["options"][0] if bad["options"] else {"id": "walk", "label": "Walking"}
            bad["options"] = [first, {"id": first["id"], "label": "The same id again"}]
        case "overlong_label":
            bad["options"] = [{"id": "long", "label": "x" * (MAX_OPTION_LABEL_CHARS + 1)}]
    return bad


def _many_actions(count: int) -> Iterator[dict[str, Any]]:
    at = datetime(2026, 11, 29, 19, 41, 57, tzinfo=UTC).isoformat()
    for number in range(1, count + 1):
        yield {"tool": "send_mail", "whom": f"person{number}@example.com", "what": f"sent mail {number}", "at": at}


def _filler(chars: int) -> str:
    sentence = "The helper found one more thing worth saying. "
    return (sentence * (chars // len(sentence) + 1))[:chars]


def _noisy(text: str) -> str:
    return f"{CONTROL_NOISE}{text[:1]}{CONTROL_NOISE}{text[1:]}{CONTROL_NOISE}"


def _add_noise(body: dict[str, Any]) -> None:
    body["last_message"] = _noisy(body["last_message"])
    for key in ("question", "error"):
        if body.get(key) is not None:
            body[key] = _noisy(body[key])
    if body.get("outcome"):
        body["outcome"]["text"] = _noisy(body["outcome"]["text"])
    if body.get("authorization"):
        body["authorization"] = {key: _noisy(value) for key, value in body["authorization"].items()}
    if body.get("choices"):
        for option in body["choices"]["options"]:
            option["label"] = _noisy(option["label"])
    body["refusals"] = [_noisy(refusal) for refusal in body["refusals"]]
    body["actions"] = [
        {**action, "tool": _noisy(action["tool"]), "whom": _noisy(action["whom"]), "what": _noisy(action["what"])}
        for action in body["actions"]
    ]


async def _oversized(session_id: str, size: int) -> AsyncIterator[bytes]:
    """A JSON snapshot of `size` bytes whose last message never seems to end, streamed chunk by chunk."""
    head = f'{{"session_id": "{session_id}", "status": "running", "input_tokens_total": 0, "last_message": "'
    yield head.encode()
    sent = len(head)
    chunk = b"x" * _STREAM_CHUNK
    while sent < size - 2:
        part = chunk[: size - 2 - sent]
        yield part
        sent += len(part)
        await asyncio.sleep(0)
    yield b'"}'


class _FakeServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # Signals belong to the program that embeds the server, not to the server.
        yield


@contextlib.asynccontextmanager
async def serving_fake_core(core: FakeCore, port: int = 0) -> AsyncIterator[str]:
    """Serve `core` on 127.0.0.1 in this event loop (port 0: a free one); yield its base URL.

    The fake keeps a handle on the server so that a lost answer can close its connection; leaving the
    block ends every pending delay or hang at once, then stops the server.
    """
    config = uvicorn.Config(
        core.app(), host=HOST, port=port, log_level="warning", access_log=False, timeout_graceful_shutdown=5
    )
    server = _FakeServer(config)
    core._server, core._stopping = server, asyncio.Event()
    task = asyncio.create_task(server.serve(), name="uvicorn-fake-core")
    try:
        await _started(server, task)
        yield f"http://{HOST}:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        core._stopping.set()
        server.should_exit = True
        await task
        core._server = core._stopping = None


async def _started(server: uvicorn.Server, task: Awaitable[None]) -> None:
    while not server.started:
        if isinstance(task, asyncio.Task) and task.done():
            # uvicorn exits (SystemExit) when it cannot bind or the app fails to start.
            error = task.exception() if not task.cancelled() else None
            raise RuntimeError(f"the fake core did not start: {error!r}")
        await asyncio.sleep(0.005)


def now() -> datetime:
    return datetime.now(UTC)
