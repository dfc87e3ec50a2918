"""Serve the reference chat inside the current event loop, for tests and the demo.

    async with running_chat(state_file=Path("data/chat.jsonl")) as base_url:
        ...

Port 0 picks a free port. With a state file, entering again on the same file restarts the chat with
its idle flags and event keys (dedup survives).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from reference.chat.app import create_app
from reference.core.server import serving


@contextlib.asynccontextmanager
async def running_chat(port: int = 0, state_file: Path | None = None) -> AsyncIterator[str]:
    """The reference chat on 127.0.0.1; yields its base URL and stops it on exit."""
    async with serving(create_app(state_file), port) as base_url:
        yield base_url
