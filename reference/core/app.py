"""The reference core's HTTP app: exactly the session contract of `contracts.core_api`.

The OpenAPI document it serves at `/openapi.json` is the written contract; `docs/core-openapi.json`
is the same document, exported by `python -m reference.core.openapi` and kept current by a test.
Every error it answers is a `Problem`, and the document says so (FastAPI's default validation-error
schema is replaced by `Problem`, since that is what the core really answers).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Query, Response, status
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from contracts.core_api import (
    MAX_LONG_POLL_WAIT_MS,
    MAX_SNAPSHOT_VERSION,
    CancelAnswer,
    CoreCapabilities,
    CreateSession,
    ModelCatalog,
    Problem,
    ResetAnswer,
    SessionCreated,
    Snapshot,
)
from reference.core.latches import LATCH_NAME, LATCH_NAME_RULE, LatchState
from reference.core.model_catalog import ModelFactory, default_models
from reference.core.problems import CoreProblem, install_problem_handlers
from reference.core.sessions import SessionService

TITLE = "Reference core"
DESCRIPTION = (
    "The agent runtime's session API (eve's contract): one background turn per session, with eve's "
    "ceilings (80 steps, 4,000,000 cumulative input tokens; R14), the task's authority on irreversible "
    "tools (R33), finish-now, cancel confirmation and durable sessions. Every error body is a Problem "
    "{code, message} whose message names what is wrong."
)
API_VERSION = "1"

_PROBLEM = "#/components/schemas/Problem"
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": Problem, "description": "There is no such session (never created, reset, or lost)."}
}


class Health(BaseModel):
    ok: bool


def create_app(
    db_path: Path,
    models: Mapping[str, ModelFactory] | None = None,
    *,
    offers_follow_ups: bool = True,
    offers_grants: bool = True,
) -> FastAPI:
    """The app serving sessions stored in `db_path`, with `models` (default: the scripted model).

    `offers_follow_ups=False` plays a core of the base contract for follow-ups: it does not advertise
    `continue_from` (tests of the runtime's fallback, which carries the earlier outcome in the task).
    `offers_grants=False` plays one without grants: it does not advertise them and refuses a create that carries one,
    as a core that does not know the field refuses it (tests of the fallback, a grant in the boundary)."""
    service = SessionService(db_path, models if models is not None else default_models())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service.start()
        try:
            yield
        finally:
            await service.stop()

    app = FastAPI(title=TITLE, description=DESCRIPTION, version=API_VERSION, lifespan=lifespan)
    install_problem_handlers(app)

    @app.post(
        "/v1/sessions",
        operation_id="createSession",
        summary="Create a session (idempotent)",
        status_code=status.HTTP_201_CREATED,
        responses={
            201: {"description": "A new session; its turn is running."},
            200: {"model": SessionCreated, "description": "The key names an existing session: nothing starts."},
            400: {"model": Problem, "description": "unknown_model, unsupported_language, invalid_script, …"},
            409: {
                "model": Problem,
                "description": (
                    "idempotency_key_conflict: the key is another owner's or helper's; continue_from_not_found, "
                    "continue_from_other_owner, continue_from_reset, continue_from_already_continued, "
                    "continue_from_not_continuable: the session named by continue_from cannot be continued."
                ),
            },
            422: {
                "model": Problem,
                "description": "invalid_request: the body does not match CreateSession; grant_mismatch: a grant's "
                "digest is not its action's.",
            },
        },
    )
    async def create_session(request: CreateSession, response: Response) -> SessionCreated:
        """Start one background turn (R9). The same `idempotency_key` always names the same session, also
        after a restart or a reset. A refused request writes nothing.

        With `continue_from` (a follow-up), the new session's conversation is that session's plus `task`: it
        must be the same owner's, not reset, not continued before, and stopped in question or authorization
        (also when cancelled there) or ended partial. Its steps and input count from zero."""
        if request.grants and not offers_grants:
            raise CoreProblem(422, "invalid_request", "grants: extra inputs are not permitted")
        created = service.create(request)
        if not created.created:
            response.status_code = status.HTTP_200_OK
        return created

    @app.get("/v1/sessions/{session_id}", operation_id="getSession", summary="Read the snapshot", responses=_NOT_FOUND)
    async def get_session(
        session_id: str,
        after: Annotated[
            int | None,
            Query(ge=0, le=MAX_SNAPSHOT_VERSION, description="The version the caller has; wait for another."),
        ] = None,
        wait_ms: Annotated[
            int, Query(ge=0, le=MAX_LONG_POLL_WAIT_MS, description="How long to wait for a change, at most.")
        ] = 0,
    ) -> Snapshot:
        """The session's finite snapshot (R11): status, per-step usage, cumulative input, last completed
        message, question, authorization wait, actions, refusals and, once it ended, the outcome.

        Long poll (R44): with `after` and `wait_ms`, the answer comes at once when the snapshot's `version`
        is not `after`, else when the snapshot changes or after `wait_ms`, with the snapshot as it is then."""
        return await service.snapshot_after(session_id, after, wait_ms)

    @app.post(
        "/v1/sessions/{session_id}/finish",
        operation_id="finishSession",
        summary="Finish now",
        status_code=status.HTTP_202_ACCEPTED,
        responses=_NOT_FOUND,
    )
    async def finish_session(session_id: str) -> Snapshot:
        """The next model call is the final one, without tools; the session ends `partial` with
        `stop_reason: finish_now` (R13, R15). Paused or ended sessions do not change."""
        return service.finish(session_id)

    @app.post("/v1/sessions/{session_id}/cancel", operation_id="cancelSession", summary="Cancel", responses=_NOT_FOUND)
    async def cancel_session(session_id: str) -> CancelAnswer:
        """Stop the turn. `stopped` is true only once the turn has actually stopped (R7); ask again until
        it is. Paused sessions stop at once; ended sessions answer `stopped: true` with their status."""
        return await service.cancel(session_id)

    @app.post("/v1/sessions/{session_id}/reset", operation_id="resetSession", summary="Reset", responses=_NOT_FOUND)
    async def reset_session(session_id: str) -> ResetAnswer:
        """Cleanup (R20): stop the turn if needed and delete the session; it is 404 afterwards."""
        return await service.reset(session_id)

    # Demo and test aids, not part of eve's contract: left out of the OpenAPI document.
    def latch_name(name: str) -> str:
        if not LATCH_NAME.fullmatch(name):
            raise CoreProblem(400, "invalid_latch", f"name: a latch name is {LATCH_NAME_RULE}")
        return name

    @app.post("/v1/demo/latches/{name}/release", include_in_schema=False)
    async def release_latch(name: str) -> LatchState:
        """Open the latch: turns held on it go on, and later arrivals pass at once."""
        return service.latches.release(latch_name(name))

    @app.get("/v1/demo/latches/{name}", include_in_schema=False)
    async def latch_state(name: str) -> LatchState:
        return service.latches.state(latch_name(name))

    @app.get("/v1/models", operation_id="listModels", summary="The models a create may select")
    async def list_models() -> ModelCatalog:
        """The catalog; the starter checks a helper's model against it before admitting it."""
        return ModelCatalog(models=service.model_names)

    @app.get("/v1/capabilities", operation_id="capabilities", summary="What this core offers beyond the base")
    async def capabilities() -> CoreCapabilities:
        """The optional parts of the contract this core offers: follow-ups (`continue_from` in a create), long
        poll (R44) and grants performed once (`grants` in a create, R55). A core without this endpoint offers none."""
        return CoreCapabilities(continue_from=offers_follow_ups, long_poll=True, grants=offers_grants)

    @app.get("/healthz", operation_id="health", summary="Health")
    async def healthz() -> Health:
        return Health(ok=True)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(title=TITLE, version=API_VERSION, description=DESCRIPTION, routes=app.routes)
            app.openapi_schema = problems_only(document)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def problems_only(document: dict[str, Any]) -> dict[str, Any]:
    """Replace FastAPI's validation-error schema by `Problem`, which is what the core answers.

    Operations with a body answer a bad body with a 422 Problem; the others take only a string path
    parameter, which cannot fail validation, so their 422 is dropped.
    """
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.get("responses", {})
            error = responses.get("422")
            if error is None:
                continue
            schema = error.get("content", {}).get("application/json", {}).get("schema", {})
            if schema.get("$ref") != "#/components/schemas/HTTPValidationError":
                continue
            if "requestBody" in operation:
                responses["422"] = {
                    "description": "invalid_request: the body does not match the schema.",
                    "content": {"application/json": {"schema": {"$ref": _PROBLEM}}},
                }
            else:
                del responses["422"]
    schemas = document.get("components", {}).get("schemas", {})
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    return document
