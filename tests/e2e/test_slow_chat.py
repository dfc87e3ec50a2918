"""A chat that answers slowly holds up no admission (R26, R43).

An offer runs as an activity, outside the coordinator's workflow task, so the owner's requests never wait for the
chat: with the default HELPER_CHECK_MS of 15 s an offer may take up to 35 s, more than the starter's 30 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from protocol.names import coordinator_id
from reference.core.script import scripted_task
from reference.core.server import running_core
from tests.e2e.conftest import Stack, _stack
from tests.helpers import eventually, helper_request

pytestmark = pytest.mark.e2e

CHAT_HANG_S = 20.0
ACCEPTED_AT = "2026-12-01T00:00:00Z"
# An admission on a machine under load: far below the chat's hang.
ADMISSION_BOUND_S = 5.0


class SlowChat:
    """Speaks the chat contract over HTTP; every idle question hangs CHAT_HANG_S before it says yes."""

    def __init__(self) -> None:
        self.idle_asked = asyncio.Event()
        self.events: list[dict[str, Any]] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            method, path, _ = request_line.split(" ", 2)
            headers = dict(line.split(": ", 1) for line in header_lines if ": " in line)
            body = await reader.readexactly(int(headers.get("content-length", headers.get("Content-Length", "0"))))
            if method == "GET" and path.endswith("/idle"):
                self.idle_asked.set()
                await asyncio.sleep(CHAT_HANG_S)
                answer: dict[str, Any] = {"idle": True}
            else:
                event = json.loads(body)
                self.events.append(event)
                answer = {
                    "event_id": f"e-{len(self.events)}",
                    "duplicate": False,
                    "accepted_at": "2026-12-01T00:00:00Z",
                }
            payload = json.dumps(answer).encode()
            status = "200 OK" if method == "GET" else "202 Accepted"
            writer.write(
                f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(payload)}\r\n"
                f"connection: close\r\n\r\n".encode()
                + payload
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def serving(chat: SlowChat) -> AsyncIterator[str]:
    server = await asyncio.start_server(chat.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()


async def _final(stack: Stack, helper_id: str) -> Any:
    row = await stack.store.get(stack.owner, helper_id)
    return row if row is not None and row.outcome_kind is not None else None


async def test_an_admission_does_not_wait_for_an_offer_to_a_hanging_chat(
    dev_env: WorkflowEnvironment, tmp_path: Any
) -> None:
    chat = SlowChat()
    async with (
        running_core(tmp_path / "core.sqlite3") as core_url,
        serving(chat) as chat_url,
        _stack(dev_env, tmp_path, core_url, chat_url, check_ms=int(CHAT_HANG_S * 1000) + 5_000) as stack,
    ):
        await stack.client.start(helper_request(stack.owner, "first", scripted_task("Done.", steps=1, step_ms=10)))
        await eventually(functools.partial(_final, stack, "first"))
        async with asyncio.timeout(30):
            await chat.idle_asked.wait()  # the offer is now waiting for the chat
        started = time.monotonic()
        admission = await stack.client.start(
            helper_request(stack.owner, "second", scripted_task("Done too.", steps=1, step_ms=10))
        )
        waited = time.monotonic() - started
        assert admission.helper_id == "second"
        assert waited < ADMISSION_BOUND_S, f"the admission waited {waited:.1f} s for the offer"
        # The offer itself still ends: the activity gets the chat's answer and sends the event.
        await eventually(lambda: _events(chat), timeout=CHAT_HANG_S + 15)
        history = await stack.env.client.get_workflow_handle(coordinator_id(stack.owner)).fetch_history()
        offers = [
            event
            for event in history.events
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and event.activity_task_scheduled_event_attributes.activity_type.name == "offer_chat_event"
        ]
        assert offers, "the slow chat's offer did not run as an activity"


async def _events(chat: SlowChat) -> list[dict[str, Any]] | None:
    return chat.events or None
