"""The codec server: the Web UI and the `temporal` CLI send it encrypted payloads and get them back readable.

It implements Temporal's remote codec protocol (POST /decode and /encode with `{"payloads": [...]}` in the
proto JSON form), answers the browser's CORS preflight for the Web UI's origin, and, with
HELPER_CODEC_TOKEN set, decodes only for requests that carry `Authorization: Bearer <token>`: whoever can
reach the UI is not automatically allowed to read personal content.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

from codec.encryption import CodecError, EncryptionCodec


def create_app(codec: EncryptionCodec, *, allowed_origins: list[str], token: str | None = None) -> FastAPI:
    app = FastAPI(title="helper-runtime codec server", docs_url=None, redoc_url=None)
    app.add_middleware(
        CORSMiddleware,
        allow_origins=allowed_origins,
        allow_credentials=True,
        allow_methods=["POST", "OPTIONS"],
        allow_headers=["Content-Type", "X-Namespace", "Authorization"],
    )

    async def convert(request: Request, step: Callable[[list[object]], Awaitable[list[object]]]) -> Response:
        if token is not None:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                return JSONResponse({"code": "unauthorized", "message": "a valid bearer token is needed"}, 401)
        try:
            payloads = json_format.Parse(await request.body(), Payloads())
        except json_format.ParseError as error:
            return JSONResponse({"code": "invalid_request", "message": f"not a Payloads JSON: {error}"}, 400)
        try:
            converted = await step(list(payloads.payloads))
        except CodecError as error:
            return JSONResponse({"code": "cannot_decode", "message": str(error)}, 422)
        body = json_format.MessageToJson(Payloads(payloads=converted))  # type: ignore[arg-type]
        return Response(body, media_type="application/json")

    @app.post("/decode")
    async def decode(request: Request) -> Response:
        return await convert(request, codec.decode)  # type: ignore[arg-type]

    @app.post("/encode")
    async def encode(request: Request) -> Response:
        return await convert(request, codec.encode)  # type: ignore[arg-type]

    @app.get("/healthz")
    async def health() -> dict[str, bool]:
        return {"ok": True}

    return app
