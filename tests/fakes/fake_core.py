"""A programmable core for workflow tests: it speaks the core's real HTTP contract, but each test decides
what the sessions do (keep running, answer finish-now or not, misbehave, go down).

The reference core is the faithful one; this fake exists for what a faithful core never does on cue:
silence, HTML error pages, wrong types, hangs, lost sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from domain.core_api import (
    Action,
    CancelAnswer,
    CreateSession,
    SessionCreated,
    SessionOutcome,
    SessionStatus,
    Snapshot,
    StepUsage,
    StopReason,
)
from reference_core.server import serving


@dataclass
class FakeSession:
    session_id: str
    request: CreateSession
    status: SessionStatus = SessionStatus.RUNNING
    steps: list[StepUsage] = field(default_factory=list)
    last_message: str = ""
    question: str | None = None
    actions: list[Action] = field(default_factory=list)
    outcome: SessionOutcome | None = None
    finish_requested: bool = False
    cancel_requested: bool = False

    def add_step(self, input_tokens: int, output_tokens: int, message: str | None = None) -> None:
        self.steps.append(StepUsage(index=len(self.steps) + 1, input_tokens=input_tokens, output_tokens=output_tokens))
        self.last_message = message or f"step {len(self.steps)} done"

    def end(self, status: SessionStatus, text: str | None = None, stop_reason: StopReason | None = None) -> None:
        self.status = status
        self.outcome = SessionOutcome(kind=status, text=text or self.last_message, stop_reason=stop_reason)
        if text:
            self.last_message = text

    def snapshot(self) -> Snapshot:
        return Snapshot(
            session_id=self.session_id,
            status=self.status,
            steps=list(self.steps),
            input_tokens_total=sum(s.input_tokens for s in self.steps),
            last_message=self.last_message,
            question=self.question,
            actions=list(self.actions),
            outcome=self.outcome,
            finish_requested=self.finish_requested,
            cancel_requested=self.cancel_requested,
        )


@dataclass
class FakeCore:
    """What the sessions do is plain data the test changes between steps."""

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
    # Misbehaviour of every answer: None, "html", "bad_json", "wrong_types", "negative", "hang", "503".
    misbehave: str | None = None
    reset_fails: bool = False
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def only_session(self) -> FakeSession:
        assert len(self.sessions) == 1, f"expected one session, have {len(self.sessions)}"
        return next(iter(self.sessions.values()))

    def session_of(self, helper_id: str) -> FakeSession | None:
        return next((s for s in self.sessions.values() if s.request.helper_id == helper_id), None)

    def app(self) -> FastAPI:
        app = FastAPI(title="fake-core")

        @app.middleware("http")
        async def misbehaviour(request: Request, call_next: Any) -> Response:
            if request.url.path.startswith("/v1/sessions/") and self.misbehave:
                bad = await self._bad_answer()
                if bad is not None:
                    return bad
            response: Response = await call_next(request)
            return response

        @app.post("/v1/sessions")
        async def create(body: CreateSession) -> JSONResponse:
            self.create_calls += 1
            if body.idempotency_key in self.by_key:
                created = SessionCreated(session_id=self.by_key[body.idempotency_key], created=False)
                return JSONResponse(created.model_dump(), status_code=200)
            session_id = f"fake-{next(self._ids)}"
            self.by_key[body.idempotency_key] = session_id
            self.sessions[session_id] = FakeSession(session_id=session_id, request=body)
            return JSONResponse(SessionCreated(session_id=session_id, created=True).model_dump(), status_code=201)

        @app.get("/v1/sessions/{session_id}")
        async def snapshot(session_id: str) -> JSONResponse:
            session = self.sessions.get(session_id)
            if session is None:
                return JSONResponse({"code": "session_not_found", "message": "no such session"}, status_code=404)
            return JSONResponse(session.snapshot().model_dump(mode="json"))

        @app.post("/v1/sessions/{session_id}/finish")
        async def finish(session_id: str) -> JSONResponse:
            self.finish_calls += 1
            session = self.sessions.get(session_id)
            if session is None:
                return JSONResponse({"code": "session_not_found", "message": "no such session"}, status_code=404)
            session.finish_requested = True
            if self.on_finish == "partial" and not session.status.is_terminal:
                session.end(SessionStatus.PARTIAL, f"partial: {session.last_message}", StopReason.FINISH_NOW)
            return JSONResponse(session.snapshot().model_dump(mode="json"), status_code=202)

        @app.post("/v1/sessions/{session_id}/cancel")
        async def cancel(session_id: str) -> JSONResponse:
            self.cancel_calls += 1
            session = self.sessions.get(session_id)
            if session is None:
                return JSONResponse({"code": "session_not_found", "message": "no such session"}, status_code=404)
            session.cancel_requested = True
            if session.status.is_terminal:
                return JSONResponse(CancelAnswer(stopped=True, status=session.status).model_dump())
            if self.on_cancel == "stop":
                session.status = SessionStatus.CANCELLED
                return JSONResponse(CancelAnswer(stopped=True, status=session.status).model_dump())
            return JSONResponse(CancelAnswer(stopped=False, status=session.status).model_dump())

        @app.post("/v1/sessions/{session_id}/reset")
        async def reset(session_id: str) -> JSONResponse:
            self.reset_calls += 1
            if self.reset_fails:
                return JSONResponse({"code": "busy", "message": "reset failed"}, status_code=503)
            if self.sessions.pop(session_id, None) is None:
                return JSONResponse({"code": "session_not_found", "message": "no such session"}, status_code=404)
            return JSONResponse({"reset": True})

        return app

    async def _bad_answer(self) -> Response | None:
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
                await asyncio.sleep(3600)
            case "503":
                return JSONResponse({"code": "unavailable", "message": "overloaded"}, status_code=503)
        return None


@contextlib.asynccontextmanager
async def serving_fake_core(core: FakeCore, port: int = 0) -> AsyncIterator[str]:
    async with serving(core.app(), port) as url:
        yield url


def now() -> datetime:
    return datetime.now(UTC)
