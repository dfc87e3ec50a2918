"""The worker's health endpoint, for Kubernetes probes."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from config.store_address import StoreAddress
from replica.health import serving_health
from store.database import create_engine
from store.helper_store import HelperStore
from tests.helpers import free_port, settings_for
from worker import running_worker

pytestmark = pytest.mark.e2e


async def test_a_running_worker_is_live_and_ready(dev_env: WorkflowEnvironment, tmp_path: Path):
    """R25: with HELPER_HEALTH_BIND set, /livez and /readyz answer 200 while the store and Temporal answer."""
    port = free_port()
    settings = settings_for(tmp_path, "http://127.0.0.1:9", "http://127.0.0.1:9").model_copy(
        update={"health_bind": f"127.0.0.1:{port}"}
    )
    async with running_worker(dev_env.client, settings), httpx.AsyncClient() as http:
        assert (await http.get(f"http://127.0.0.1:{port}/livez")).status_code == 200
        ready = await http.get(f"http://127.0.0.1:{port}/readyz")
        assert (ready.status_code, ready.json()) == (200, {"ok": True, "problems": {}})


async def test_not_ready_names_what_does_not_answer():
    """R25: a worker whose store and Temporal do not answer reports 503 naming both, so Kubernetes takes it
    out of service until they are back; it is still live."""
    port = free_port()
    store = HelperStore(create_engine(StoreAddress.parse("postgresql+asyncpg://nobody@127.0.0.1:9/none")))
    client = await Client.connect("127.0.0.1:9", lazy=True)
    try:
        async with serving_health(f"127.0.0.1:{port}", store, client), httpx.AsyncClient(timeout=10) as http:
            assert (await http.get(f"http://127.0.0.1:{port}/livez")).status_code == 200
            ready = await http.get(f"http://127.0.0.1:{port}/readyz")
            assert ready.status_code == 503
            assert set(ready.json()["problems"]) == {"store", "temporal"}
    finally:
        await store.close()
