"""The worker's health endpoint for Kubernetes probes, GET /livez and GET /readyz on HELPER_HEALTH_BIND, and
its application metrics for Prometheus, GET /metrics on the same port.

/livez answers while the worker's event loop runs. /readyz also asks the store and Temporal, each within two
seconds, and answers 503 naming what does not answer; a worker that cannot reach them takes no new work
anyway, so its pod should leave the Service's endpoints until they are back.

/metrics serves observability.metrics.REGISTRY (`helper_runtime_*`) in Prometheus' text format, after
refreshing the store-derived gauges (bounded: a store that does not answer within two seconds leaves them as
they were and sets helper_runtime_store_up to 0). The Temporal SDK's own metrics are served on
HELPER_METRICS_BIND by the SDK (worker.py); deploy/k8s/worker-metrics.yaml scrapes both.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client

from observability.metrics import REGISTRY
from observability.store_gauges import StoreGauges
from store.helper_store import HelperStore

log = logging.getLogger(__name__)
CHECK_SECONDS = 2.0
JSON = "application/json"


async def _readiness(store: HelperStore, client: Client) -> dict[str, str]:
    async def store_answers() -> None:
        async with store.engine.connect() as connection:
            await connection.execute(text("SELECT 1"))

    async def temporal_answers() -> None:
        await client.workflow_service.get_system_info(GetSystemInfoRequest())

    problems: dict[str, str] = {}
    checks: dict[str, Callable[[], Awaitable[None]]] = {"store": store_answers, "temporal": temporal_answers}
    for name, check in checks.items():
        try:
            async with asyncio.timeout(CHECK_SECONDS):
                await check()
        except Exception as error:
            problems[name] = f"{type(error).__name__}: {error}"[:300]
    return problems


@contextlib.asynccontextmanager
async def serving_health(
    bind: str | None, store: HelperStore, client: Client, gauges: StoreGauges | None = None
) -> AsyncIterator[None]:
    if not bind:
        yield
        return
    host, _, port = bind.rpartition(":")

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            # A client that connects and sends nothing must not hold a task for ever. The headers are read
            # too: closing with them unread would reset the connection under a long answer (/metrics).
            async with asyncio.timeout(CHECK_SECONDS):
                request_line = (await reader.readline()).decode("latin-1").split()
                while (await reader.readline()).strip():
                    pass
            path = request_line[1] if len(request_line) > 1 else "/"
            body: dict[str, object]
            content_type, payload = JSON, b""
            if path == "/livez":
                status, body = 200, {"ok": True, "problems": {}}
            elif path == "/readyz":
                problems = await _readiness(store, client)
                status, body = (503 if problems else 200), {"ok": not problems, "problems": problems}
            elif path == "/metrics":
                if gauges is not None:
                    await gauges.refresh()  # bounded, never raises
                status, body = 200, {}
                content_type, payload = CONTENT_TYPE_LATEST, generate_latest(REGISTRY)
            else:
                status, body = 404, {"ok": False, "problems": {"path": f"no {path}; use /livez, /readyz or /metrics"}}
            payload = payload or json.dumps(body).encode()
            reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}[status]
            writer.write(
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
                + payload
            )
            await writer.drain()
        except TimeoutError:
            pass  # nothing was asked in time; the connection is closed below
        finally:
            writer.close()

    server = await asyncio.start_server(answer, host or "0.0.0.0", int(port))
    log.info("health endpoint on %s (/livez, /readyz, /metrics)", bind)
    try:
        yield
    finally:
        server.close()
        await server.wait_closed()
