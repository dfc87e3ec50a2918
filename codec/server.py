"""The codec server: the Web UI and the `temporal` CLI send it encrypted payloads and get them back readable.

It implements Temporal's remote codec protocol (POST /decode and /encode with `{"payloads": [...]}` in the
proto JSON form) and answers the browser's CORS preflight for the Web UI's origin. Who may read is decided by
`codec.auth.Authorizer` (OIDC access tokens for Web UI users, a static token for the CLI, and the allowed
namespaces); whoever can reach the UI is not automatically allowed to read personal content (R39).
docs/codec-server.md describes the settings, the error codes and the probes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads

from codec.auth import AuthError, Authorizer, AuthSettings
from codec.encryption import CodecError, EncryptionCodec
from config.settings import CodecServerSettings

DEFAULT_MAX_BODY_BYTES = CodecServerSettings().max_body_bytes  # HELPER_CODEC_MAX_BODY_BYTES' default

Step = Callable[[Sequence[Payload]], Coroutine[Any, Any, list[Payload]]]

log = logging.getLogger(__name__)


class BodyTooLarge(Exception):
    """The request body is over the cap."""


class MalformedRequest(ValueError):
    """The body is not a Payloads JSON."""


def error_response(status: int, code: str, message: str) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"code": code, "message": message}, status, headers=headers)


async def read_capped(request: Request, max_bytes: int) -> bytes:
    """The body, refused as soon as its declared or streamed size passes `max_bytes` (never buffered past it)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise BodyTooLarge
    body = bytearray()
    async for chunk in request.stream():
        if len(body) + len(chunk) > max_bytes:
            raise BodyTooLarge
        body += chunk
    return bytes(body)


def convert_blocking(body: bytes, step: Step) -> bytes:
    """Parse, decode or encode, and serialize: CPU work for a worker thread, not the event loop."""
    try:
        payloads = json_format.Parse(body, Payloads())
    except (json_format.ParseError, ValueError, RecursionError) as error:
        # ValueError: bytes that are not UTF-8; RecursionError: absurdly nested JSON.
        raise MalformedRequest(f"not a Payloads JSON: {str(error)[:300]}") from None
    # The codec's methods are coroutines that never wait on anything; a private loop runs one in this thread.
    converted = asyncio.run(step(list(payloads.payloads)))
    return json_format.MessageToJson(Payloads(payloads=converted)).encode()


def create_app(
    codec: EncryptionCodec,
    *,
    allowed_origins: list[str],
    token: str | None = None,
    authorizer: Authorizer | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> FastAPI:
    """The app. Give either `authorizer` (the full auth model) or just `token` (static token, namespace `default`)."""
    if authorizer is not None and token is not None:
        raise ValueError("give the static token through the authorizer's settings, not both")
    auth = authorizer or Authorizer(AuthSettings(token=token or None))

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # Fetch the JWKS early so the first UI request does not wait for it; a slow IdP delays nothing else.
        warm_up = asyncio.create_task(asyncio.to_thread(auth.warm_up)) if auth.oidc_enabled else None
        yield
        if warm_up is not None:
            warm_up.cancel()

    app = FastAPI(title="helper-runtime codec server", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.add_middleware(
        CORSMiddleware,
        allow_origins=allowed_origins,
        allow_credentials=True,
        allow_methods=["POST", "OPTIONS"],
        allow_headers=["Content-Type", "X-Namespace", "Authorization"],
    )

    async def convert(request: Request, step: Step) -> Response:
        authorization = request.headers.get("authorization")
        namespace = request.headers.get("x-namespace")
        try:
            # The OIDC check may fetch the JWKS (blocking HTTP); the static-token check is cheap.
            if auth.oidc_enabled:
                decision = await asyncio.to_thread(auth.check, authorization, namespace)
            else:
                decision = auth.check(authorization, namespace)
        except AuthError as refusal:
            log.info("refused %s %s: %s", request.method, request.url.path, refusal.message)
            return error_response(refusal.status, refusal.code, refusal.message)
        try:
            body = await read_capped(request, max_body_bytes)
        except BodyTooLarge:
            return error_response(413, "too_large", f"the request body is over {max_body_bytes} bytes")
        try:
            answer = await asyncio.to_thread(convert_blocking, body, step)
        except MalformedRequest as error:
            return error_response(422, "invalid_request", str(error))
        except CodecError as error:
            return error_response(422, "cannot_decode", str(error))
        log.debug("%s for %s (%s) in %s", request.url.path, decision.principal, decision.method, decision.namespace)
        return Response(answer, media_type="application/json")

    @app.post("/decode")
    async def decode(request: Request) -> Response:
        return await convert(request, codec.decode)

    @app.post("/encode")
    async def encode(request: Request) -> Response:
        return await convert(request, codec.encode)

    @app.get("/livez")
    async def livez() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/readyz")
    @app.get("/healthz")  # the older name, still used by the local demo stack
    async def readyz() -> dict[str, Any]:
        # The keys are loaded once the app exists. The JWKS is reported, not required: the CLI's static token
        # works without the IdP, and a slow IdP must not take the pod out of service.
        status: dict[str, Any] = {"ok": True, "keys": True}
        if auth.oidc_enabled:
            status["jwks_fetched"] = auth.jwks_fetched
        return status

    return app
