"""The worker's health endpoint for Kubernetes probes, GET /livez and GET /readyz on HELPER_HEALTH_BIND, and
its application metrics for Prometheus, GET /metrics on the same port.

/livez answers while the worker's event loop runs. /readyz also asks the store and Temporal, each within two
seconds, and answers 503 naming what does not answer; a worker that cannot reach them takes no new work
anyway, so its pod should leave the Service's endpoints until they are back.

/metrics serves observability.metrics.REGISTRY (`helper_runtime_*`) in Prometheus' text format, after
refreshing the store-derived gauges (`StoreGauges`: helpers by row state, helpers past their hard ceiling, and
whether the store answers; bounded: a store that does not answer within two seconds leaves them as they were and
sets helper_runtime_store_up to 0). The Temporal SDK's own metrics are served on
HELPER_METRICS_BIND by the SDK (worker.py); deploy/k8s/worker-metrics.yaml scrapes both.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Final

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client

from domain.rows import RowState
from observability.metrics import HELPERS, HELPERS_PAST_HARD_CEILING, REGISTRY, STORE_UP
from store.helper_store import HelperStore

log = logging.getLogger(__name__)
CHECK_SECONDS = 2.0
JSON = "application/json"

# A helper still running this long after its hard ceiling is stuck (R35); shorter is the ceiling's own slack.
PAST_CEILING_MARGIN: Final = timedelta(minutes=1)


class StoreGauges:
    """The store-derived gauges: helpers by row state, helpers past their hard ceiling, and whether the store answers.

    They are refreshed when Prometheus scrapes /metrics, not on a timer: no scrape, no query. Each
    refresh is two small reads bounded by `timeout_s`; when the store does not answer in time the gauges keep
    their last values and STORE_UP goes 0, so a scrape never hangs on the database. Refreshes closer together
    than `min_interval_s` reuse the last count (several Prometheus replicas may scrape the same pod).

    Every worker counts the whole store, so these gauges are the same on every replica: aggregate them with
    max(), never sum().
    """

    def __init__(
        self, store: HelperStore, task_queue: str, *, timeout_s: float = 2.0, min_interval_s: float = 1.0
    ) -> None:
        self.store = store
        self.task_queue = task_queue
        self.timeout_s = timeout_s
        self.min_interval_s = min_interval_s
        self._lock = asyncio.Lock()
        self._last_refresh = -float("inf")

    async def refresh(self) -> None:
        """Count the rows once (concurrent scrapes share it); never raises, never waits past `timeout_s`
        for the store (plus the wait for a refresh already under way, itself bounded the same)."""
        async with self._lock:
            if time.monotonic() - self._last_refresh < self.min_interval_s:
                return
            try:
                async with asyncio.timeout(self.timeout_s):
                    by_state, past_ceiling = await self._count(datetime.now(UTC))
            except Exception as error:  # a timeout, an unreachable or broken database: report it, keep values
                STORE_UP.set(0)
                log.warning("store gauges not refreshed: %s: %s", type(error).__name__, error)
            else:
                for state in RowState:
                    HELPERS.labels(state.value, self.task_queue).set(by_state.get(state.value, 0))
                HELPERS_PAST_HARD_CEILING.set(past_ceiling)
                STORE_UP.set(1)
            self._last_refresh = time.monotonic()

    async def _count(self, now: datetime) -> tuple[dict[str, int], int]:
        by_state = await self.store.count_by_state()
        past = sum(1 for ceiling in await self.store.running_hard_ceilings() if ceiling + PAST_CEILING_MARGIN < now)
        return by_state, past


async def _readiness(store: HelperStore, client: Client) -> dict[str, str]:
    async def temporal_answers() -> None:
        await client.workflow_service.get_system_info(GetSystemInfoRequest())

    problems: dict[str, str] = {}
    checks: dict[str, Callable[[], Awaitable[None]]] = {"store": store.reads.ping, "temporal": temporal_answers}
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
