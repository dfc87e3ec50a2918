"""An HTTP client for the core's session API, every call bounded by HELPER_CHECK_MS (R10).

One exception hierarchy tells the caller what went wrong: the core is unreachable or slow, it
answered with something that is not the contract, it refused the request, or it does not know
the session.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from domain.core_api import CancelAnswer, CreateSession, ResetAnswer, SessionCreated, Snapshot

Answer = TypeVar("Answer", bound=BaseModel)


class CoreError(Exception):
    """Any failure talking to the core."""


class CoreUnavailable(CoreError):
    """No answer in time, a transport error, or a 5xx: the core may come back."""


class CoreProtocolError(CoreError):
    """The core answered, but not with the contract's shape (HTML error page, missing fields, ...)."""


class CoreRejected(CoreError):
    """The core refused the request with a 4xx and a Problem body."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(f"core refused ({status}): {message}")


class SessionNotFound(CoreError):
    """The core does not know the session: it was lost (R24) or already reset."""


class CoreClient:
    def __init__(self, base_url: str, check_ms: int, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.check_seconds = check_ms / 1000
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), timeout=httpx.Timeout(self.check_seconds), transport=transport
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def create(self, request: CreateSession) -> SessionCreated:
        return await self._call("POST", "/v1/sessions", SessionCreated, json=request.model_dump(mode="json"))

    async def snapshot(self, session_id: str) -> Snapshot:
        return await self._call("GET", f"/v1/sessions/{session_id}", Snapshot)

    async def finish(self, session_id: str) -> Snapshot:
        return await self._call("POST", f"/v1/sessions/{session_id}/finish", Snapshot)

    async def cancel(self, session_id: str) -> CancelAnswer:
        return await self._call("POST", f"/v1/sessions/{session_id}/cancel", CancelAnswer)

    async def reset(self, session_id: str) -> ResetAnswer:
        return await self._call("POST", f"/v1/sessions/{session_id}/reset", ResetAnswer)

    async def _call(self, method: str, path: str, answer: type[Answer], json: Any = None) -> Answer:
        try:
            # httpx bounds each phase; this bounds the whole call, so a trickling answer cannot exceed it.
            async with asyncio.timeout(self.check_seconds):
                response = await self._http.request(method, path, json=json)
        except TimeoutError:
            raise CoreUnavailable(f"{method} {path}: no answer within {self.check_seconds:g} s") from None
        except httpx.HTTPError as error:
            raise CoreUnavailable(f"{method} {path}: {type(error).__name__}: {error}") from None
        if response.status_code == 404:
            raise SessionNotFound(f"{method} {path}: {_problem_message(response)}")
        if response.status_code >= 500:
            raise CoreUnavailable(f"{method} {path}: {response.status_code} {_problem_message(response)}")
        if response.status_code >= 400:
            raise CoreRejected(response.status_code, _problem_message(response))
        try:
            return answer.model_validate_json(response.content)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(map(str, first.get("loc", ()))) or "body"
            raise CoreProtocolError(
                f"{method} {path}: answer is not a valid {answer.__name__} ({where}: {first.get('msg')})"
            ) from None


def _problem_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200].strip() or response.reason_phrase
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])
    return response.text[:200]
