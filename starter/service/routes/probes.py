"""The probes and the metrics: no token, no owner data. Live while the process serves; ready while the store
answers (the reads need nothing else; Temporal is reported, not required)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from protocol.errors import StarterError, Unavailable
from starter.service import metrics
from starter.service.context import service_of

READY_CHECK_S = 2.0

router = APIRouter(include_in_schema=False)


@router.get("/livez")
async def livez() -> dict[str, bool]:
    return {"ok": True}


@router.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    """Ready while the store answers: the reads need nothing else. Temporal is reported, not required."""
    service = service_of(request)
    status: dict[str, Any] = {"ok": True, "temporal_connected": service.connections.temporal_connected}
    try:
        if service.stopping.is_set():
            raise Unavailable("the service is stopping")
        async with asyncio.timeout(READY_CHECK_S):
            reader = await service.connections.reader()
            await reader.store.ping()
    except (StarterError, TimeoutError, OSError) as error:
        status.update(ok=False, store=str(error) or "no answer within 2 s")
        return JSONResponse(status, 503)
    return JSONResponse(status)


@router.get("/metrics")
async def prometheus() -> Response:
    return Response(generate_latest(metrics.REGISTRY), media_type=CONTENT_TYPE_LATEST)
