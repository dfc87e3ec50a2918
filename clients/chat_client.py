"""An HTTP client for the chat bridge: is the owner's chat idle, and take this system event (R26)."""

from __future__ import annotations

import httpx
from pydantic import ValidationError

from contracts.chat_api import EventReceipt, IdleAnswer, SystemEvent


class ChatError(Exception):
    """The chat could not be asked, or did not answer with the contract."""


class ChatUncertain(ChatError):
    """The event may or may not have been taken: the request left, but no valid receipt came back."""


class ChatClient:
    def __init__(self, base_url: str, timeout_ms: int, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), timeout=httpx.Timeout(timeout_ms / 1000), transport=transport
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def is_idle(self, owner: str) -> bool:
        try:
            response = await self._http.get(f"/v1/owners/{owner}/idle")
            response.raise_for_status()
            return IdleAnswer.model_validate_json(response.content).idle
        except (httpx.HTTPError, ValidationError) as error:
            raise ChatError(f"idle check failed: {type(error).__name__}: {error}") from None

    async def send_event(self, owner: str, event: SystemEvent) -> EventReceipt:
        try:
            response = await self._http.post(f"/v1/owners/{owner}/events", json=event.model_dump(mode="json"))
        except (httpx.ConnectError, httpx.ConnectTimeout) as error:
            raise ChatError(f"event not sent: {type(error).__name__}: {error}") from None
        except httpx.HTTPError as error:
            # The request may have reached the chat: only the key makes a repeat harmless.
            raise ChatUncertain(f"event outcome unknown: {type(error).__name__}: {error}") from None
        if response.status_code >= 500:
            # The chat may have taken the event before failing to answer: only the key makes a repeat safe.
            raise ChatUncertain(f"chat answered {response.status_code}: {response.text[:200]}")
        if response.status_code >= 400:
            raise ChatError(f"chat refused the event: {response.status_code} {response.text[:200]}")
        try:
            return EventReceipt.model_validate_json(response.content)
        except ValidationError as error:
            raise ChatUncertain(f"chat answered without a valid receipt: {error.errors()[0].get('msg')}") from None
