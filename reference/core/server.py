"""Serve the reference core inside the current event loop, for tests and the demo.

    async with running_core(Path("data/core.sqlite3")) as base_url:
        ...  # e.g. "http://127.0.0.1:41234"

Port 0 picks a free port. Leaving the block stops the server and every running turn without writing
anything, exactly like a process that stopped; entering again on the same db (and port) is how tests
restart the core.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from reference.core.app import create_app
from reference.core.model_catalog import ModelFactory

HOST = "127.0.0.1"


class _EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # Signals belong to the program that embeds the server, not to the server.
        yield


@contextlib.asynccontextmanager
async def serving(app: FastAPI, port: int = 0, host: str = HOST) -> AsyncIterator[str]:
    """Run `app` with uvicorn in this event loop; yield its base URL; stop it on exit."""
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", access_log=False, timeout_graceful_shutdown=5
    )
    server = _EmbeddedServer(config)
    task = asyncio.create_task(server.serve(), name=f"uvicorn-{app.title}")
    while not server.started:
        if task.done():
            # uvicorn exits (SystemExit) when it cannot bind or the app fails to start.
            error = task.exception() if not task.cancelled() else None
            raise RuntimeError(f"{app.title} did not start on {host}:{port}: {error!r}")
        await asyncio.sleep(0.005)
    bound_port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound_port}"
    finally:
        server.should_exit = True
        await task


@contextlib.asynccontextmanager
async def running_core(
    db_path: Path,
    port: int = 0,
    *,
    models: Mapping[str, ModelFactory] | None = None,
    offers_follow_ups: bool = True,
    offers_grants: bool = True,
) -> AsyncIterator[str]:
    """The reference core on 127.0.0.1 with its sessions in `db_path`; yields the base URL."""
    app = create_app(db_path, models, offers_follow_ups=offers_follow_ups, offers_grants=offers_grants)
    async with serving(app, port) as base_url:
        yield base_url
