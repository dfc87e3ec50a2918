"""The chat client tells a chat that surely did not take the event from one that may have (R26).

Each answer is played by a real HTTP server on loopback (`tests.fakes.answering_server`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from clients.chat_client import ChatClient, ChatError, ChatUncertain
from contracts.chat_api import SystemEvent
from tests.fakes.answering_server import Handler, serving_answers
from tests.helpers import BOUNDED_S, HANG_S

EVENT = SystemEvent(key="anna/e1", helper_ids=["h1"], text="Helper h1 is ready.")
RECEIPT = {"event_id": "ev-1", "duplicate": False, "accepted_at": "2026-12-02T03:00:00Z"}


async def send(handler: Handler, timeout_ms: int = 2_000) -> object:
    async with serving_answers(handler) as url:
        chat = ChatClient(url, timeout_ms)
        try:
            return await chat.send_event("anna", EVENT)
        finally:
            await chat.aclose()


async def refused(handler: Handler, timeout_ms: int = 2_000) -> ChatError:
    with pytest.raises(ChatError) as raised:
        await send(handler, timeout_ms)
    return raised.value


async def test_an_event_with_its_receipt_is_delivered_and_carries_its_key() -> None:
    asked: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        return httpx.Response(201, json=RECEIPT)

    receipt = await send(answer)
    assert getattr(receipt, "event_id", None) == "ev-1"
    assert asked[0].url.path == "/v1/owners/anna/events"
    assert json.loads(asked[0].content)["key"] == "anna/e1"


async def test_a_chat_that_cannot_be_reached_surely_did_not_take_the_event() -> None:
    async with serving_answers(lambda request: httpx.Response(200)) as url:
        pass  # stopped: its port refuses connections
    chat = ChatClient(url, 2_000)
    try:
        with pytest.raises(ChatError) as raised:
            await chat.send_event("anna", EVENT)
        with pytest.raises(ChatError, match="idle check failed"):
            await chat.is_idle("anna")
    finally:
        await chat.aclose()
    assert type(raised.value) is ChatError and "event not sent" in str(raised.value)


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(500, text="internal"),
        httpx.Response(502, html="<h1>Bad Gateway</h1>"),
        httpx.Response(200, html="<p>welcome</p>"),
        httpx.Response(200, json={"duplicate": False}),
        httpx.Response(302, headers={"location": "http://elsewhere.test/"}),
    ],
    ids=["500", "502-html", "200-html", "no-event-id", "redirect"],
)
async def test_an_answer_without_a_valid_receipt_is_uncertain(answer: httpx.Response) -> None:
    """A 5xx, or a success without a receipt, may follow a taken event: uncertain, so it is not offered as new
    (a redirect is not followed: the event is not sent anywhere else)."""
    error = await refused(lambda request: answer)
    assert type(error) is ChatUncertain


async def test_a_refusal_is_a_plain_error() -> None:
    error = await refused(lambda request: httpx.Response(422, json={"message": "unknown owner"}))
    assert type(error) is ChatError and "422" in str(error)


async def test_a_chat_that_holds_the_answer_is_uncertain_within_the_timeout() -> None:
    async def holds(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(HANG_S)
        return httpx.Response(201, json=RECEIPT)

    started = time.monotonic()
    error = await refused(holds, timeout_ms=200)
    assert type(error) is ChatUncertain
    assert time.monotonic() - started < BOUNDED_S


async def test_an_endless_answer_is_bounded_by_the_timeout() -> None:
    async def endless() -> AsyncIterator[bytes]:
        while True:
            yield b" " * 1024
            await asyncio.sleep(0.01)

    started = time.monotonic()
    error = await refused(lambda request: httpx.Response(201, content=endless()), timeout_ms=300)
    assert type(error) is ChatUncertain
    assert time.monotonic() - started < BOUNDED_S


async def test_the_idle_answer_is_read_and_a_malformed_one_is_an_error() -> None:
    async with serving_answers(lambda request: httpx.Response(200, json={"idle": False})) as url:
        chat = ChatClient(url, 2_000)
        try:
            assert await chat.is_idle("anna") is False
        finally:
            await chat.aclose()
    async with serving_answers(lambda request: httpx.Response(200, text="yes")) as url:
        chat = ChatClient(url, 2_000)
        try:
            with pytest.raises(ChatError, match="idle check failed"):
                await chat.is_idle("anna")
        finally:
            await chat.aclose()
