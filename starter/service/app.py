"""The service's HTTP app: every starter command as a route, with the console script's checks, JSON bodies and
refusals (`starter.commands`, `starter.output`), and its exit codes as HTTP statuses: each kind of error carries
both (`protocol.errors`; the table is in docs/api.md) (R42, R47).

Beyond the console script: 401 `unauthorized` without the service token, 413 `too_large` for a body over the
cap, 408 `request_timeout` for a body that did not arrive in time (`starter.service.read_timeout`). Live lines are
Server-Sent Events. docs/api.md describes it all.

`create_app` assembles the routers (`starter.service.routes`), the error replies (`starter.service.replies`) and
the document (`starter.service.document`); `with_guards` puts the guards before it (`starter.service.guards`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from functools import partial

from fastapi import FastAPI
from starlette.types import ASGIApp

from config.settings import ServiceSettings, Settings, release_build_id
from starter.service.connections import Connections
from starter.service.context import ServiceState
from starter.service.document import precise_openapi
from starter.service.guards import Guard, Measured, Shedding
from starter.service.replies import add_error_handlers
from starter.service.routes import goals, helpers, live_lines, probes


def create_app(settings: Settings, connections: Connections | None = None) -> FastAPI:
    """The app, served as `settings.service` says; `connections` (the store and Temporal) open on first use and
    close when the app stops."""
    service = ServiceState(settings, connections or Connections(settings, settings.service.store_pool_size))

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        service.stop()
        await service.connections.aclose()

    app = FastAPI(
        title="helper-runtime starter API",
        version=release_build_id(),  # one number for the image, the build id, the API and its client
        description="Iva's helpers over HTTP: the commands of `helper-starter`, with its checks, JSON bodies and "
        "refusals; live lines as Server-Sent Events. See docs/api.md.",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.service = service
    add_error_handlers(app)
    for router in (helpers.router, goals.router, live_lines.router, probes.router):
        app.include_router(router)
    app.openapi = partial(precise_openapi, app)  # type: ignore[method-assign]
    return app


def with_guards(app: FastAPI, service: ServiceSettings) -> ASGIApp:
    """The app behind its guard (token, body cap), the shedding of writes it cannot answer in time, and its
    measurements: what uvicorn serves."""
    state: ServiceState = app.state.service
    guarded = Guard(app, service.token, service.max_body_bytes)
    return Measured(Shedding(guarded, state.connections, state.settings))
