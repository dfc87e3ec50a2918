"""The codec server: the Web UI and the `temporal` CLI send it encrypted payloads and get them back readable.

It implements Temporal's remote codec protocol (POST /decode and /encode with `{"payloads": [...]}` in the
proto JSON form) and answers the browser's CORS preflight for the Web UI's origin. Who may read is decided by
`codec.auth.Authorizer` (OIDC access tokens for Web UI users, a static token for the CLI, and the allowed
namespaces); whoever can reach the UI is not automatically allowed to read personal content (R39).

`create_app` assembles the routers by concern (`payload_routes`: /decode and /encode; `probe_routes`), which
reach the app's codec, authorizer and body cap through their request (`CodecService`). A refusal is the starter
API's error object, and the body is capped as the API caps its own (`contracts.http_service`).
docs/codec-server.md describes the settings, the error codes and the probes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads

from codec.auth import AuthError, Authorizer, AuthSettings, Decision
from codec.encryption import CodecError, EncryptionCodec
from config.settings import CodecServerSettings
from contracts.http_service import BodyTooLarge, plain_error, read_capped, too_large

DEFAULT_MAX_BODY_BYTES = CodecServerSettings().max_body_bytes  # HELPER_CODEC_MAX_BODY_BYTES' default

Step = Callable[[Sequence[Payload]], Coroutine[Any, Any, list[Payload]]]

log = logging.getLogger(__name__)

payload_routes = APIRouter()
probe_routes = APIRouter()


@dataclass(frozen=True)
class CodecService:
    """What every route of one app shares. It is the app's `state.codec`; a route reaches it through its request."""

    codec: EncryptionCodec
    auth: Authorizer
    max_body_bytes: int


def service_of(request: Request) -> CodecService:
    service: CodecService = request.app.state.codec
    return service


class MalformedRequest(ValueError):
    """The body is not a Payloads JSON."""


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
    app = FastAPI(title="helper-runtime codec server", docs_url=None, redoc_url=None, lifespan=_warming_up)
    app.state.codec = CodecService(codec, auth, max_body_bytes)
    app.add_middleware(
        CORSMiddleware,
        allow_origins=allowed_origins,
        allow_credentials=True,
        allow_methods=["POST", "OPTIONS"],
        allow_headers=["Content-Type", "X-Namespace", "Authorization"],
    )
    for router in (payload_routes, probe_routes):
        app.include_router(router)
    return app


@contextlib.asynccontextmanager
async def _warming_up(app: FastAPI) -> AsyncIterator[None]:
    # Fetch the JWKS early so the first UI request does not wait for it; a slow IdP delays nothing else.
    service: CodecService = app.state.codec
    auth = service.auth
    warm_up = asyncio.create_task(asyncio.to_thread(auth.warm_up)) if auth.oidc_enabled else None
    yield
    if warm_up is not None:
        warm_up.cancel()


@payload_routes.post("/decode")
async def decode(request: Request) -> Response:
    return await convert(request, service_of(request).codec.decode)


@payload_routes.post("/encode")
async def encode(request: Request) -> Response:
    return await convert(request, service_of(request).codec.encode)


async def convert(request: Request, step: Step) -> Response:
    """Authorize, read the body within the cap, convert it off the event loop: each refusal in this order."""
    service = service_of(request)
    try:
        decision = await authorize(service.auth, request)
    except AuthError as refusal:
        log.info("refused %s %s: %s", request.method, request.url.path, refusal.message)
        return refused(refusal)
    try:
        body = await read_capped(request.scope, request.receive, service.max_body_bytes)
    except BodyTooLarge:
        return too_large(service.max_body_bytes, "HELPER_CODEC_MAX_BODY_BYTES")
    try:
        answer = await asyncio.to_thread(convert_blocking, body, step)
    except MalformedRequest as error:
        return plain_error(422, "invalid_request", str(error))
    except CodecError as error:
        return plain_error(422, "cannot_decode", str(error))
    log.debug("%s for %s (%s) in %s", request.url.path, decision.principal, decision.method, decision.namespace)
    return Response(answer, media_type="application/json")


async def authorize(auth: Authorizer, request: Request) -> Decision:
    authorization = request.headers.get("authorization")
    namespace = request.headers.get("x-namespace")
    # The OIDC check may fetch the JWKS (blocking HTTP); the static-token check is cheap.
    if auth.oidc_enabled:
        return await asyncio.to_thread(auth.check, authorization, namespace)
    return auth.check(authorization, namespace)


def refused(refusal: AuthError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if refusal.status == 401 else None
    return plain_error(refusal.status, refusal.code, refusal.message, headers)


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


@probe_routes.get("/livez")
async def livez() -> dict[str, bool]:
    return {"ok": True}


@probe_routes.get("/readyz")
@probe_routes.get("/healthz")  # the older name, still used by the local demo stack
async def readyz(request: Request) -> dict[str, Any]:
    # The keys are loaded once the app exists. The JWKS is reported, not required: the CLI's static token works
    # without the IdP, and a slow IdP must not take the pod out of service.
    auth = service_of(request).auth
    status: dict[str, Any] = {"ok": True, "keys": True}
    if auth.oidc_enabled:
        status["jwks_fetched"] = auth.jwks_fetched
    return status
