"""The reference chat's HTTP app: the chat-bridge contract of `contracts.chat_api`, plus test controls.

Controls (reference chat only): PUT idle sets an owner's idle flag; PUT /v1/control/failing makes
every events POST misbehave: "down" answers 503 and stores nothing; "lose_receipt" stores the event
and answers 503; "slow_receipt" stores it and answers only after `delay_ms`, so a caller's timeout
leaves it uncertain whether the chat took it (R26). A repeat with the same key is then harmless.

With a runtime URL the chat tells the runtime when an owner's chat is idle (`reference.chat.runtime`), as
the real chat does, so a waiting event is offered within seconds rather than at the runtime's next backoff:
PUT idle `{"idle": true}` tells it about that owner (unless the body says `"tell_runtime": false`, or the
chat is down), and turning failing off tells it about every known owner whose chat is idle (the chat answers
again). Telling is best effort and bounded: the control answers within about 2 s whatever the runtime does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Request, status
from fastapi import Path as PathParameter
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from contracts.chat_api import EventReceipt, IdleAnswer, ReceivedEvent, SystemEvent
from contracts.core_api import Problem
from domain.ids import ID_PATTERN
from reference.chat.runtime import Runtime
from reference.chat.state import ChatState

logger = logging.getLogger(__name__)

Owner = Annotated[str, PathParameter(pattern=ID_PATTERN.pattern)]


class FailingMode(StrEnum):
    DOWN = "down"  # answer 503 before storing anything
    LOSE_RECEIPT = "lose_receipt"  # store the event, then answer 503: the receipt is lost
    SLOW_RECEIPT = "slow_receipt"  # store the event, answer only after delay_ms (a caller's timeout)


class FailingControl(BaseModel):
    failing: bool
    mode: FailingMode = FailingMode.DOWN
    delay_ms: int = Field(default=2000, ge=0, le=60_000, description="The answer's delay in slow_receipt.")


class IdleControl(IdleAnswer):
    """The PUT idle control's body: the flag, and whether turning idle tells the runtime."""

    tell_runtime: bool = Field(
        default=True, description="False: store the flag only (a bench measuring the runtime without the nudge)."
    )


class ChatUnavailable(Exception):
    pass


def _problem(status_code: int, code: str, message: str) -> JSONResponse:
    return JSONResponse(Problem(code=code, message=message).model_dump(), status_code=status_code)


def _describe(errors: Sequence[Any]) -> str:
    described = []
    for error in errors:
        parts = [str(part) for part in error.get("loc", ())]
        field = ".".join(parts[1:] if len(parts) > 1 else parts) or "request"
        if error.get("type") == "missing":
            described.append(f"{field} is missing")
        else:
            described.append(f"{field}: {error.get('msg', 'is invalid')}")
    return "; ".join(described)


def create_app(
    state_file: Path | None = None, *, runtime_url: str | None = None, runtime_token: str | None = None
) -> FastAPI:
    """The app; with `runtime_url` (the runtime's starter API) it tells the runtime when an owner's chat is idle."""
    state: ChatState | None = None
    control = FailingControl(failing=False)
    runtime = Runtime(runtime_url, runtime_token)

    def chat() -> ChatState:
        if state is None:
            raise RuntimeError("the reference chat is not started")
        return state

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        nonlocal state
        state = ChatState(state_file)
        try:
            async with runtime:
                yield
        finally:
            state.close()
            state = None

    app = FastAPI(
        title="Reference chat",
        description="Iva's side of the chat bridge: idle flag and inbound system events.",
        version="1",
        lifespan=lifespan,
    )

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        return _problem(422, "invalid_request", _describe(error.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, error: StarletteHTTPException) -> JSONResponse:
        return _problem(error.status_code, "http_error", f"{request.method} {request.url.path}: {error.detail}")

    @app.exception_handler(ChatUnavailable)
    async def _unavailable(request: Request, error: ChatUnavailable) -> JSONResponse:
        return _problem(503, "chat_unavailable", str(error))

    @app.get("/v1/owners/{owner}/idle")
    async def get_idle(owner: Owner) -> IdleAnswer:
        return IdleAnswer(idle=chat().idle(owner))

    @app.put("/v1/owners/{owner}/idle")
    async def put_idle(owner: Owner, new: IdleControl) -> IdleAnswer:
        chat().set_idle(owner, new.idle)
        # A down chat tells nobody; it tells every idle owner when it answers again (put_failing).
        if new.idle and new.tell_runtime and not is_down():
            await runtime.tell_idle(owner)
        return IdleAnswer(idle=new.idle)

    def is_down() -> bool:
        return control.failing and control.mode is FailingMode.DOWN

    @app.post(
        "/v1/owners/{owner}/events",
        status_code=status.HTTP_202_ACCEPTED,
        responses={503: {"model": Problem, "description": "The chat is failing (a control)."}},
    )
    async def post_event(owner: Owner, event: SystemEvent) -> EventReceipt:
        if is_down():
            raise ChatUnavailable("the chat is down (control: failing)")
        receipt = chat().take(owner, event)
        if control.failing and control.mode is FailingMode.LOSE_RECEIPT:
            raise ChatUnavailable("the chat took the event but its answer was lost (control: lose_receipt)")
        if control.failing and control.mode is FailingMode.SLOW_RECEIPT:
            await asyncio.sleep(control.delay_ms / 1000)
        logger.info("event %s for %s (duplicate: %s)", event.key, owner, receipt.duplicate)
        return receipt

    @app.get("/v1/owners/{owner}/events")
    async def get_events(owner: Owner) -> list[ReceivedEvent]:
        return chat().events(owner)

    @app.get("/v1/control/failing")
    async def get_failing() -> FailingControl:
        return control

    @app.put("/v1/control/failing")
    async def put_failing(new: FailingControl) -> FailingControl:
        nonlocal control
        answers_again = control.failing and not new.failing
        control = new
        if answers_again:
            # The runtime backed off while the chat failed; an idle owner need not wait out that backoff.
            await runtime.tell_all_idle(owner for owner in chat().owners() if chat().idle(owner))
        return control

    @app.get("/healthz")
    async def healthz() -> dict[str, bool]:
        return {"ok": True}

    return app
