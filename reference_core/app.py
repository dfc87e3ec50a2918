"""The reference core's HTTP app: exactly the session contract of `domain.core_api`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Response, status

from domain.core_api import CancelAnswer, CreateSession, Problem, ResetAnswer, SessionCreated, Snapshot
from reference_core.model_catalog import ModelFactory, default_models
from reference_core.problems import install_problem_handlers
from reference_core.sessions import SessionService

_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": Problem, "description": "There is no such session."}}


def create_app(db_path: Path, models: Mapping[str, ModelFactory] | None = None) -> FastAPI:
    """The app serving sessions stored in `db_path`, with `models` (default: the scripted model)."""
    service = SessionService(db_path, models if models is not None else default_models())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service.start()
        try:
            yield
        finally:
            await service.stop()

    app = FastAPI(
        title="Reference core",
        description="The agent runtime's session API (eve's contract) with a scripted model.",
        version="1",
        lifespan=lifespan,
    )
    install_problem_handlers(app)

    @app.post(
        "/v1/sessions",
        status_code=status.HTTP_201_CREATED,
        responses={
            200: {"model": SessionCreated, "description": "The key names an existing session."},
            400: {"model": Problem},
            409: {"model": Problem},
            422: {"model": Problem},
        },
    )
    async def create_session(request: CreateSession, response: Response) -> SessionCreated:
        created = service.create(request)
        if not created.created:
            response.status_code = status.HTTP_200_OK
        return created

    @app.get("/v1/sessions/{session_id}", responses=_NOT_FOUND)
    async def get_session(session_id: str) -> Snapshot:
        return service.snapshot(session_id)

    @app.post("/v1/sessions/{session_id}/finish", status_code=status.HTTP_202_ACCEPTED, responses=_NOT_FOUND)
    async def finish_session(session_id: str) -> Snapshot:
        return service.finish(session_id)

    @app.post("/v1/sessions/{session_id}/cancel", responses=_NOT_FOUND)
    async def cancel_session(session_id: str) -> CancelAnswer:
        return await service.cancel(session_id)

    @app.post("/v1/sessions/{session_id}/reset", responses=_NOT_FOUND)
    async def reset_session(session_id: str) -> ResetAnswer:
        return await service.reset(session_id)

    @app.get("/healthz")
    async def healthz() -> dict[str, bool]:
        return {"ok": True}

    return app
