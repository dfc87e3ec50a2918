"""What the runtime's own HTTP services, the starter API (`starter/service/`) and the codec server
(`codec/server.py`), do alike: every error is one JSON object, `{"error": {"code": …, "message": …}}` (the
console script's, `protocol.errors`), and a request's body is read up to a cap and never further. It lives in the
bottom layer because the codec sits below the starter (`protocol` imports it), so it cannot import the starter's."""

from __future__ import annotations

from collections.abc import Mapping

from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope


class BodyTooLarge(Exception):
    """The request's body is over the cap."""


def plain_error(status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status, headers=headers)


def too_large(max_bytes: int, variable: str) -> JSONResponse:
    """413 `too_large`, naming the cap and the variable that sets it."""
    return plain_error(413, "too_large", f"the request body is over {max_bytes} bytes ({variable})")


async def read_capped(scope: Scope, receive: Receive, max_bytes: int) -> bytes:
    """The request's body; `BodyTooLarge` as soon as its declared or received size passes `max_bytes`, so an
    oversized one is never buffered past the cap, and `ClientDisconnect` if the caller goes away before it came."""
    declared = dict(scope["headers"]).get(b"content-length", b"")
    if declared.isdigit() and int(declared) > max_bytes:
        raise BodyTooLarge
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientDisconnect
        body += message.get("body", b"")
        if len(body) > max_bytes:
            raise BodyTooLarge
        if not message.get("more_body", False):
            return bytes(body)
