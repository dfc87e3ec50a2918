"""An HTTP client for the chat bridge: is the owner's chat idle, and take this system event (R26)."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

import httpx
from pydantic import ValidationError

from clients.http import peer_client
from config.settings import Settings
from contracts.chat_api import EventReceipt, IdleAnswer, SystemEvent

# Only the start of a refusal is quoted; a receipt is a few hundred bytes, so nothing larger is read.
ANSWER_MAX_BYTES = 64 * 1024


class ChatError(Exception):
    """The chat could not be asked, or did not answer with the contract."""


class ChatUncertain(ChatError):
    """The event may or may not have been taken: the request left, but no valid receipt came back."""


class _NotSent(Exception):
    """The request never reached the chat: no connection could be made in time."""


class ChatClient:
    def __init__(self, base_url: str, timeout_ms: int, *, connections: int = 1, proxy: str | None = None) -> None:
        """`connections`: how many calls may be under way at once; the worker gives its activity slots."""
        self._base = base_url.rstrip("/")
        self._timeout_s = timeout_ms / 1000
        self._connections = connections
        self._proxy = proxy
        self._http: httpx.AsyncClient | None = None

    @classmethod
    def of_worker(cls, settings: Settings) -> ChatClient:
        """The worker's client: a connection for each short activity slot (the follows never call the chat),
        through the configured proxy if any."""
        return cls(
            settings.chat_url,
            settings.policy.check_ms,
            connections=settings.max_concurrent_activities,
            proxy=settings.chat_proxy,
        )

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            # Connecting has half the call's bound: a chat not reached by then was surely not sent the event.
            # A timeout later, even while still connecting, counts as uncertain (the key makes a repeat
            # harmless). The whole call is bounded in `_ask`.
            self._http = peer_client(connections=self._connections, proxy=self._proxy, connect_s=self._timeout_s / 2)
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()

    async def is_idle(self, owner: str) -> bool:
        try:
            status, body = await self._ask("GET", f"/v1/owners/{quote(owner, safe='')}/idle")
            if not 200 <= status < 300:
                raise ChatError(f"idle check failed: chat answered {status}: {_start(body)}")
            return IdleAnswer.model_validate_json(body).idle
        except (_NotSent, httpx.TransportError, OSError, ValidationError) as error:
            raise ChatError(f"idle check failed: {_named(error)}") from None

    async def send_event(self, owner: str, event: SystemEvent) -> EventReceipt:
        try:
            status, body = await self._ask(
                "POST", f"/v1/owners/{quote(owner, safe='')}/events", json=event.model_dump(mode="json")
            )
        except _NotSent as error:
            raise ChatError(f"event not sent: {error}") from None
        except (httpx.TransportError, OSError) as error:
            # The request may have reached the chat: only the key makes a repeat harmless.
            raise ChatUncertain(f"event outcome unknown: {_named(error)}") from None
        if status >= 500:
            # The chat may have taken the event before failing to answer: only the key makes a repeat safe.
            raise ChatUncertain(f"chat answered {status}: {_start(body)}")
        if status >= 400:
            raise ChatError(f"chat refused the event: {status} {_start(body)}")
        try:
            return EventReceipt.model_validate_json(body)
        except ValidationError as error:
            raise ChatUncertain(f"chat answered without a valid receipt: {error.errors()[0].get('msg')}") from None

    async def _ask(self, method: str, path: str, json: Any = None) -> tuple[int, bytes]:
        """The status and the body's first ANSWER_MAX_BYTES, within the timeout as a whole."""
        request = self._client().build_request(method, self._base + path, json=json)
        try:
            async with asyncio.timeout(self._timeout_s):
                response = await self._client().send(request, stream=True)
                try:
                    body = bytearray()
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) >= ANSWER_MAX_BYTES:
                            break
                    return response.status_code, bytes(body[:ANSWER_MAX_BYTES])
                finally:
                    await response.aclose()
        except (httpx.ConnectError, httpx.ConnectTimeout) as error:
            raise _NotSent(_named(error)) from None
        except TimeoutError:
            raise TimeoutError(f"no answer within {self._timeout_s:g} s") from None  # an OSError, as the callers catch


def _named(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _start(body: bytes) -> str:
    return body[:200].decode("utf-8", errors="replace")
