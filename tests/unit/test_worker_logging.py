"""The worker's logs: one line per expected fault, no line per core request (docs/configuration.md)."""

from __future__ import annotations

import logging

import httpx
import pytest

from clients.core_client import CoreClient
from tests.fakes.answering_server import serving_answers
from worker import configure_logging

SNAPSHOT = {"session_id": "s-1", "status": "running", "steps": [], "input_tokens_total": 0}


async def test_core_requests_are_not_logged_at_info(caplog: pytest.LogCaptureFixture) -> None:
    """R10: two core requests a second per followed helper would drown the log: at INFO a hundred core calls
    log nothing (httpx, the worker's clients' library, logs warnings only)."""
    root = logging.getLogger()
    level = root.level
    try:
        configure_logging("INFO")
        assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
        assert logging.getLogger("activities.session").isEnabledFor(logging.INFO)
        async with serving_answers(lambda request: httpx.Response(200, json=SNAPSHOT)) as url:
            core = CoreClient(url, 2_000)
            try:
                with caplog.at_level(logging.INFO):
                    for _ in range(100):
                        await core.snapshot("s-1")
            finally:
                await core.aclose()
    finally:
        root.setLevel(level)
    assert [record for record in caplog.records if record.name.startswith(("httpx", "httpcore", "clients"))] == []
