"""An HTTP client for the core's session API, every call bounded by HELPER_CHECK_MS (R10).

One exception hierarchy tells the caller what went wrong: the core is unreachable or slow, it
answered with something that is not the contract, it refused the request, or it does not know
the session.

The client distrusts what it reads (R37): the body is read up to `CORE_ANSWER_MAX_BYTES` and no
further, the answer must have the contract's shape (`contracts.core_api`: counters within sane bounds,
printable identifiers, control characters stripped from texts), and a snapshot must be the one asked
for. Whatever fails is a `CoreProtocolError`, which the follow counts toward HELPER_CORE_BAD_ANSWERS;
so nothing malformed is returned to a caller that would store it. Error messages are short and clean:
they quote at most a short, control-character-free excerpt of what the core sent.
"""

from __future__ import annotations

import asyncio
import functools
import json as jsonlib
import time
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from clients.http import peer_client
from config.settings import Settings
from contracts.core_api import (
    CancelAnswer,
    CoreCapabilities,
    CreateSession,
    ModelCatalog,
    ResetAnswer,
    SessionCreated,
    Snapshot,
    strip_control_characters,
)
from observability import recording
from observability.tracing import core_span

Answer = TypeVar("Answer", bound=BaseModel)
P = ParamSpec("P")
T = TypeVar("T")

# The largest answer body the client reads. The biggest legitimate answer is a snapshot; with 80 steps
# it is a few KB plus its texts, and a 5 MB last message or ten thousand actions still fit. Anything
# larger is not a snapshot a helper can use: reading stops there instead of buffering without end.
CORE_ANSWER_MAX_BYTES = 16 * 1024 * 1024
# Of an error answer (4xx, 5xx) only the Problem's message is used, so only its start is read.
ERROR_BODY_MAX_BYTES = 64 * 1024
# Excerpts of what the core sent (a Problem's message, an id, a body) are cut to this in messages.
EXCERPT_MAX_CHARS = 200
# How long the core's capabilities are trusted before they are asked again.
CAPABILITIES_TTL_S = 60.0


class CoreError(Exception):
    """Any failure talking to the core. `kind` is how the metrics count it (helper_runtime_core_errors)."""

    kind = "status"


class CoreUnavailable(CoreError):
    """No answer in time, a transport error, or a 5xx: the core may come back."""

    def __init__(self, message: str, kind: str = "status") -> None:
        super().__init__(message)
        self.kind = kind  # timeout, connect (the transport failed) or status (a 5xx)


class CoreProtocolError(CoreError):
    """The core answered, but not with the contract's shape (HTML error page, missing fields, counters out
    of range, a snapshot of another session, a body over the cap, ...)."""

    kind = "malformed"


class CoreRejected(CoreError):
    """The core refused the request with a 4xx and a Problem body."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(f"core refused ({status}): {message}")


class SessionNotFound(CoreError):
    """The core does not know the session: it was lost (R24) or already reset."""


def core_endpoint(
    endpoint: str,
) -> Callable[[Callable[P, Coroutine[Any, Any, T]]], Callable[P, Coroutine[Any, Any, T]]]:
    """Times a core client method for the metrics and counts its failures by kind; cancellation is timed only."""

    def decorate(call: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, Coroutine[Any, Any, T]]:
        @functools.wraps(call)
        async def timed(*args: P.args, **kwargs: P.kwargs) -> T:
            started = time.perf_counter()
            kind: str | None = None
            try:
                return await call(*args, **kwargs)
            except CoreError as error:
                kind = error.kind
                raise
            except Exception:
                kind = "other"
                raise
            finally:
                recording.core_request(endpoint, time.perf_counter() - started, kind)

        return timed

    return decorate


class CoreClient:
    """The core's session API: one httpx client (`clients.http.peer_client`), made at the first call."""

    def __init__(self, base_url: str, check_ms: int, *, connections: int = 1, proxy: str | None = None) -> None:
        """`connections`: how many calls may be under way at once; the worker gives its activity and follow slots,
        a caller that asks one thing at a time keeps the default."""
        self.check_seconds = check_ms / 1000
        self._base = base_url.rstrip("/")
        self._connections = connections
        self._proxy = proxy
        self._http: httpx.AsyncClient | None = None
        self._capabilities: tuple[float, CoreCapabilities] | None = None

    @classmethod
    def of_worker(cls, settings: Settings) -> CoreClient:
        """The worker's client: a connection for each activity slot and each follow slot (a follow holds one long
        poll at a time), through the configured proxy if any."""
        return cls(
            settings.core_url,
            settings.policy.check_ms,
            connections=settings.max_concurrent_activities + settings.max_concurrent_follows,
            proxy=settings.core_proxy,
        )

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = peer_client(connections=self._connections, proxy=self._proxy)
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()

    # Every call is bounded by HELPER_CHECK_MS (R10) unless the caller gives `timeout_s`: a cleanup without
    # time pressure (after the outcome is final) may allow a few check intervals.

    @core_endpoint("create")
    async def create(self, request: CreateSession, *, timeout_s: float | None = None) -> SessionCreated:
        body = request.model_dump(mode="json")
        return await self._call("POST", "/v1/sessions", SessionCreated, json=body, timeout_s=timeout_s)

    @core_endpoint("snapshot")
    async def snapshot(
        self, session_id: str, *, timeout_s: float | None = None, after: int | None = None, wait_ms: int = 0
    ) -> Snapshot:
        """The session's snapshot; a snapshot of any other session is a protocol error (R37).

        With `after` (the version the caller has) and `wait_ms`, a long poll (R44): a core that versions its
        snapshots answers when the snapshot changes or after `wait_ms`; the call is then bounded by
        `wait_ms` plus the usual bound."""
        path = _session_path(session_id)
        params: dict[str, int] | None = None
        if after is not None and wait_ms > 0:
            params = {"after": after, "wait_ms": wait_ms}
            timeout_s = (self.check_seconds if timeout_s is None else timeout_s) + wait_ms / 1000
        answer = await self._call("GET", path, Snapshot, timeout_s=timeout_s, params=params)
        return _same_session("GET", path, session_id, answer)

    @core_endpoint("finish")
    async def finish(self, session_id: str, *, timeout_s: float | None = None) -> Snapshot:
        """Finish now; the answer is the session's snapshot, and must be this session's (R37)."""
        path = _session_path(session_id, "finish")
        return _same_session("POST", path, session_id, await self._call("POST", path, Snapshot, timeout_s=timeout_s))

    @core_endpoint("cancel")
    async def cancel(self, session_id: str, *, timeout_s: float | None = None) -> CancelAnswer:
        return await self._call("POST", _session_path(session_id, "cancel"), CancelAnswer, timeout_s=timeout_s)

    @core_endpoint("reset")
    async def reset(self, session_id: str, *, timeout_s: float | None = None) -> ResetAnswer:
        return await self._call("POST", _session_path(session_id, "reset"), ResetAnswer, timeout_s=timeout_s)

    @core_endpoint("models")
    async def models(self, *, timeout_s: float | None = None) -> list[str] | None:
        """The models the core offers, or None when it has no catalog (404): then only create can tell."""
        try:
            return (await self._call("GET", "/v1/models", ModelCatalog, timeout_s=timeout_s)).models
        except SessionNotFound:  # a plain 404: this core has no catalog endpoint
            return None

    @core_endpoint("capabilities")
    async def capabilities(self, *, timeout_s: float | None = None) -> CoreCapabilities:
        """What the core offers beyond the base contract; a core without the endpoint (404) offers nothing.

        Asked again after CAPABILITIES_TTL_S, so a core upgraded (or rolled back) under a running worker is
        seen within a minute; a failed ask is not remembered."""
        now = time.monotonic()
        if self._capabilities is not None and now - self._capabilities[0] < CAPABILITIES_TTL_S:
            return self._capabilities[1]
        try:
            offered = await self._call("GET", "/v1/capabilities", CoreCapabilities, timeout_s=timeout_s)
        except SessionNotFound:  # a plain 404: a core of the base contract
            offered = CoreCapabilities()
        self._capabilities = (now, offered)
        return offered

    async def _call(
        self,
        method: str,
        path: str,
        answer: type[Answer],
        json: Any = None,
        timeout_s: float | None = None,
        params: dict[str, int] | None = None,
    ) -> Answer:
        where = f"{method} {path}"
        seconds = self.check_seconds if timeout_s is None else timeout_s
        # The path is quoted already (`_session_path`): httpx sends it as it is, so a quoted "/" stays quoted.
        request = self._client().build_request(method, self._base + path, json=json, params=params)
        try:
            # One bound for the whole call, body included, so a trickling answer cannot exceed it.
            async with core_span(method, path), asyncio.timeout(seconds):  # the span records a timeout too
                response = await self._client().send(request, stream=True)
                try:
                    status, reason = response.status_code, response.reason_phrase
                    if 200 <= status < 300:
                        body = await _read_capped(response, CORE_ANSWER_MAX_BYTES, where)
                    else:
                        body = await _read_start(response, ERROR_BODY_MAX_BYTES)
                finally:
                    await response.aclose()
        except TimeoutError:
            raise CoreUnavailable(f"{where}: no answer within {seconds:g} s", "timeout") from None
        except httpx.DecodingError as error:
            raise CoreProtocolError(f"{where}: the answer's encoding is broken ({_excerpt(str(error))})") from None
        except (httpx.TransportError, OSError) as error:
            raise CoreUnavailable(f"{where}: {type(error).__name__}: {_excerpt(str(error))}", "connect") from None
        if status == 404:
            raise SessionNotFound(f"{where}: {_problem_message(body, reason)}")
        if status >= 500:
            raise CoreUnavailable(f"{where}: {status} {_problem_message(body, reason)}")
        if status >= 400:
            raise CoreRejected(status, _problem_message(body, reason))
        if not 200 <= status < 300:
            raise CoreProtocolError(f"{where}: unexpected status {status}")
        try:
            return answer.model_validate_json(body)
        except ValidationError as error:
            first = error.errors(include_url=False, include_input=False)[0]
            place = _excerpt(".".join(map(str, first.get("loc", ()))) or "body", 80)
            raise CoreProtocolError(
                f"{where}: answer is not a valid {answer.__name__} ({place}: {_excerpt(str(first.get('msg')))})"
            ) from None


def _session_path(session_id: str, action: str | None = None) -> str:
    # The id is quoted whole: an id with "/", "?" or ".." cannot reach another endpoint. An id of dots alone is
    # quoted too: the URL would resolve it as a "." or ".." segment before it is sent.
    quoted = quote(session_id, safe="")
    path = f"/v1/sessions/{quoted.replace('.', '%2E') if quoted in ('.', '..') else quoted}"
    return path if action is None else f"{path}/{action}"


def _same_session(method: str, path: str, session_id: str, snapshot: Snapshot) -> Snapshot:
    if snapshot.session_id != session_id:
        raise CoreProtocolError(
            f"{method} {path}: answer is the snapshot of session {_excerpt(snapshot.session_id, 80)!r}, "
            f"not of {_excerpt(session_id, 80)!r}"
        )
    return snapshot


async def _read_capped(response: httpx.Response, cap: int, where: str) -> bytes:
    """The whole body, decoded, or CoreProtocolError as soon as it is known to exceed `cap` bytes (R37)."""
    too_large = CoreProtocolError(f"{where}: answer larger than {cap} bytes")
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise too_large
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > cap:
            raise too_large
    return bytes(body)


async def _read_start(response: httpx.Response, cap: int) -> bytes:
    """The first `cap` bytes of the body; the rest is not read (the connection is closed with the response)."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) >= cap:
            break
    return bytes(body[:cap])


def _problem_message(body: bytes, reason: str) -> str:
    """The Problem's message, or the start of whatever the body is; short and without control characters."""
    text = body.decode("utf-8", errors="replace")
    try:
        problem = jsonlib.loads(text)
    except (ValueError, RecursionError):
        return _excerpt(text) or reason
    if isinstance(problem, dict) and isinstance(problem.get("message"), str):
        return _excerpt(problem["message"]) or reason
    return _excerpt(text) or reason


def _excerpt(text: str, limit: int = EXCERPT_MAX_CHARS) -> str:
    """`text` without control characters, on one line, cut to `limit` characters."""
    clean = " ".join(strip_control_characters(text).split())
    return clean if len(clean) <= limit else clean[: limit - 1] + "…"
