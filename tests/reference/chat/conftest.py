from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest_asyncio

from reference.chat.server import running_chat


@pytest_asyncio.fixture(scope="module")
async def chat() -> AsyncIterator[httpx.AsyncClient]:
    """One in-memory reference chat per test module."""
    async with running_chat() as base_url, httpx.AsyncClient(base_url=base_url, timeout=5) as client:
        yield client


@pytest_asyncio.fixture
async def healthy(chat: httpx.AsyncClient) -> AsyncIterator[httpx.AsyncClient]:
    """The chat, switched back to healthy after a test that made it fail."""
    yield chat
    await chat.put("/v1/control/failing", json={"failing": False})
