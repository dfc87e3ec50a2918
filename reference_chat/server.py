"""Serve the reference chat inside the current event loop, for tests and the demo.

    async with running_chat(state_file=Path("data/chat.jsonl")) as base_url:
        ...

Port 0 picks a free port. With a state file, entering again on the same file restarts the chat with
its idle flags and event keys (dedup survives). The reference chat and core are separate services,
so each has its own small copy of this in-loop runner.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import uvicorn

from reference_chat.app import create_app

HOST = "127.0.0.1"


class _EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # Signals belong to the program that embeds the server, not to the server.
        yield


@contextlib.asynccontextmanager
async def running_chat(port: int = 0, state_file: Path | None = None) -> AsyncIterator[str]:
    """The reference chat on 127.0.0.1; yields its base URL and stops it on exit."""
    config = uvicorn.Config(
        create_app(state_file),
        host=HOST,
        port=port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    server = _EmbeddedServer(config)
    task = asyncio.create_task(server.serve(), name="uvicorn-reference-chat")
    while not server.started:
        if task.done():
            # uvicorn exits (SystemExit) when it cannot bind or the app fails to start.
            error = task.exception() if not task.cancelled() else None
            raise RuntimeError(f"the reference chat did not start on {HOST}:{port}: {error!r}")
        await asyncio.sleep(0.005)
    bound_port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{HOST}:{bound_port}"
    finally:
        server.should_exit = True
        await task
