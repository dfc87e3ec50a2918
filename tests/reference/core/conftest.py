"""Fixtures for the reference core's own tests: every module gets its own reference core on a free port.

To check another core against the contract, use the conformance suite: `pytest tests/conformance
--core-url URL` (see docs/reference-core.md).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio

from reference.core.model import ModelRequest
from reference.core.server import running_core
from tests.reference.core.support import recording_catalog


@pytest_asyncio.fixture(scope="module")
async def core(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """One reference core per test module with the shipped models."""
    async with running_core(tmp_path_factory.mktemp("core") / "core.sqlite3") as base_url:
        yield base_url


@pytest_asyncio.fixture(scope="module")
async def client(core: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=core, timeout=5) as http:
        yield http


@pytest_asyncio.fixture(scope="module")
async def recording(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[httpx.AsyncClient, dict[str, list[ModelRequest]]]]:
    """A reference core whose scripted model records every request, keyed by helper id."""
    models, recorded = recording_catalog()
    async with (
        running_core(tmp_path_factory.mktemp("recording") / "core.sqlite3", models=models) as base_url,
        httpx.AsyncClient(base_url=base_url, timeout=5) as http,
    ):
        yield http, recorded
