"""The reference chat tells the runtime when an owner's chat is idle: on PUT idle and when it answers again.

The runtime is a fake over real HTTP that records each POST it gets and can answer slowly or with 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from reference.chat.app import create_app
from reference.chat.runtime import TELL_CONCURRENCY, TELL_TIMEOUT_S
from reference.core.server import serving
from tests.helpers import BOUNDED_S, HANG_S

TOKEN = "a-service-token-of-32-characters"
# The control's answer waits out at most one call's bound (TELL_TIMEOUT_S), where a runtime that hangs holds its
# answer for ever: a test tells the two apart by BOUNDED_S, which a loaded machine cannot reach by accident.
ANSWER_BOUND_S = BOUNDED_S


@dataclass
class FakeRuntime:
    """The runtime's `POST /v1/owners/{owner}/idle`: records (owner, Authorization) and answers as set."""

    url: str = ""
    told: list[tuple[str, str | None]] = field(default_factory=list)
    status: int = 200
    hang: bool = False
    release: asyncio.Event = field(default_factory=asyncio.Event)
    arrived: list[float] = field(default_factory=list)  # monotonic

    def owners(self) -> list[str]:
        return [owner for owner, _ in self.told]

    def app(self) -> FastAPI:
        app = FastAPI(title="Fake runtime")

        @app.post("/v1/owners/{owner}/idle")
        async def idle(owner: str, request: Request) -> JSONResponse:
            self.told.append((owner, request.headers.get("authorization")))
            self.arrived.append(time.monotonic())
            if self.hang:
                await self.release.wait()  # until the test ends, far past the chat's bound
            return JSONResponse({"owner": owner, "told": True}, status_code=self.status)

        return app


@contextlib.asynccontextmanager
async def running_runtime() -> AsyncIterator[FakeRuntime]:
    runtime = FakeRuntime()
    async with serving(runtime.app()) as url:
        runtime.url = url
        try:
            yield runtime
        finally:
            runtime.release.set()  # a hanging answer would hold up the server's stop


@contextlib.asynccontextmanager
async def chat_telling(runtime_url: str | None, token: str | None = TOKEN) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(runtime_url=runtime_url, runtime_token=token)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url, timeout=10) as client:
        yield client


@pytest.fixture
async def runtime() -> AsyncIterator[FakeRuntime]:
    async with running_runtime() as runtime:
        yield runtime


@pytest.fixture
async def chat(runtime: FakeRuntime) -> AsyncIterator[httpx.AsyncClient]:
    async with chat_telling(runtime.url) as client:
        yield client


async def eventually(check: Callable[[], bool], within_s: float = HANG_S) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, "not within the deadline"
        await asyncio.sleep(0.02)


async def timed_put(chat: httpx.AsyncClient, path: str, body: dict[str, object]) -> tuple[httpx.Response, float]:
    began = time.monotonic()
    response = await chat.put(path, json=body)
    return response, time.monotonic() - began


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_an_idle_chat_tells_the_runtime_with_the_token(chat: httpx.AsyncClient, runtime: FakeRuntime) -> None:
    """Told, the runtime offers a waiting event now rather than at the end of its backoff."""
    put = await chat.put("/v1/owners/ada/idle", json={"idle": True})

    assert put.status_code == 200 and put.json() == {"idle": True}
    # The PUT waits for its call, so the runtime has it already.
    assert runtime.told == [("ada", f"Bearer {TOKEN}")]


async def test_a_busy_chat_or_a_bench_opting_out_tells_nobody(chat: httpx.AsyncClient, runtime: FakeRuntime) -> None:
    busy = await chat.put("/v1/owners/ada/idle", json={"idle": False})
    quiet = await chat.put("/v1/owners/bob/idle", json={"idle": True, "tell_runtime": False})

    assert busy.json() == {"idle": False}
    assert quiet.json() == {"idle": True}
    assert (await chat.get("/v1/owners/bob/idle")).json() == {"idle": True}
    await chat.put("/v1/owners/marker/idle", json={"idle": True})  # told after the others, if they were
    assert runtime.owners() == ["marker"]


async def test_without_a_token_no_authorization_is_sent(runtime: FakeRuntime) -> None:
    async with chat_telling(runtime.url, token=None) as chat:
        await chat.put("/v1/owners/ada/idle", json={"idle": True})

    assert runtime.told == [("ada", None)]


async def test_without_a_runtime_url_nobody_is_told(runtime: FakeRuntime) -> None:
    async with chat_telling(None) as chat:
        put = await chat.put("/v1/owners/ada/idle", json={"idle": True})
        await chat.put("/v1/control/failing", json={"failing": True})
        await chat.put("/v1/control/failing", json={"failing": False})

    assert put.status_code == 200
    assert runtime.told == []


@pytest.mark.parametrize("trouble", ["down", "hangs", "answers 500"])
async def test_a_runtime_in_trouble_never_fails_or_holds_up_the_control(
    runtime: FakeRuntime, trouble: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"http://127.0.0.1:{free_port()}" if trouble == "down" else runtime.url
    runtime.hang = trouble == "hangs"
    runtime.status = 500 if trouble == "answers 500" else 200

    with caplog.at_level(logging.WARNING, logger="reference.chat.runtime"):
        async with chat_telling(url) as chat:
            put, took_s = await timed_put(chat, "/v1/owners/ada/idle", {"idle": True})

    assert put.status_code == 200 and put.json() == {"idle": True}
    assert took_s < ANSWER_BOUND_S
    (warning,) = warnings(caplog)
    cause = {"down": "ConnectError", "hangs": f"no answer within {TELL_TIMEOUT_S:g} s", "answers 500": "answered 500"}
    assert " ada is idle" in warning and cause[trouble] in warning


async def test_a_chat_answering_again_tells_the_runtime_of_each_idle_owner(
    chat: httpx.AsyncClient, runtime: FakeRuntime
) -> None:
    """The runtime backed off while the chat failed; every idle owner it knows is told, a busy one is not."""
    await chat.put("/v1/owners/busy/idle", json={"idle": False})
    await chat.post("/v1/owners/cyd/events", json={"key": "k", "helper_ids": ["h1"], "text": "t"})  # known by it
    await chat.put("/v1/control/failing", json={"failing": True})
    # While down the chat tells nobody, even of an owner turning idle; coming back covers it.
    await chat.put("/v1/owners/ada/idle", json={"idle": True})
    await chat.get("/v1/owners/bob/idle")  # known from the runtime's question, idle by default
    assert runtime.told == []

    await chat.put("/v1/control/failing", json={"failing": False})

    # The PUT waits for the calls within their bound; a fast runtime has them all when it answers.
    assert sorted(runtime.told) == [(owner, f"Bearer {TOKEN}") for owner in ("ada", "bob", "cyd")]
    await chat.put("/v1/control/failing", json={"failing": False})  # already answering: not "again"
    assert len(runtime.told) == 3


async def test_a_failing_mode_that_answers_still_tells(chat: httpx.AsyncClient, runtime: FakeRuntime) -> None:
    """Only a down chat keeps quiet: one that loses receipts answers the runtime's idle question."""
    await chat.put("/v1/control/failing", json={"failing": True, "mode": "lose_receipt"})
    await chat.put("/v1/owners/ada/idle", json={"idle": True})

    assert runtime.owners() == ["ada"]


async def test_many_owners_answering_again_are_told_in_bounded_time(
    runtime: FakeRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    """A hanging runtime holds the control up for one bound, not one per owner; each owner is still tried."""
    # The chat's own bound: a shorter one can end a call before the loaded machine delivered it to the runtime,
    # which then never sees that owner although the chat tried.
    bound_s = TELL_TIMEOUT_S
    owners = [f"owner-{number}" for number in range(25)]
    runtime.hang = True
    with caplog.at_level(logging.WARNING, logger="reference.chat.runtime"):
        async with chat_telling(runtime.url) as chat:
            for owner in owners:
                await chat.get(f"/v1/owners/{owner}/idle")
            await chat.put("/v1/control/failing", json={"failing": True})

            put, took_s = await timed_put(chat, "/v1/control/failing", {"failing": False})

            # One bound, not one per owner (25 x 2 s): the rest go on after the control answered.
            assert put.status_code == 200 and took_s < BOUNDED_S < len(owners) * bound_s
            # A few at a time: the rest go on after the control answered, each with its own bound.
            await eventually(lambda: sorted(runtime.owners()) == sorted(owners))
            await eventually(lambda: len(warnings(caplog)) == len(owners))

    # No more than TELL_CONCURRENCY at once: the next call came only when one of the first had given up.
    assert runtime.arrived[TELL_CONCURRENCY] - runtime.arrived[0] >= bound_s - 0.05
    assert {owner for owner in owners if any(f" {owner} is idle" in line for line in warnings(caplog))} == set(owners)
