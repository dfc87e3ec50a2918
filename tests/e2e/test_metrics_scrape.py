"""The worker's metrics, scraped over real HTTP as Prometheus would: the application's on the health port's
/metrics, the Temporal SDK's on HELPER_METRICS_BIND. Dev server, worker, reference core and chat in one event
loop; three scripted helpers complete and a fourth is refused while they run.

The registry is process-wide, so counters are compared before and after; the store gauges count this test's
own store (its own task queue label), so they are compared as they are."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from config.settings import Settings
from domain.outcome import OutcomeKind
from domain.rows import RowState
from protocol.errors import HelperRefused
from reference.chat.server import running_chat
from reference.core.script import scripted_task
from reference.core.server import running_core
from starter.client import HelperClient
from store.helper_store import HelperStore
from tests.e2e.conftest import E2E_FOLLOW
from tests.helpers import eventually, free_port, helper_request, settings_for
from worker import _runtime, running_worker

pytestmark = pytest.mark.e2e

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
HELPERS = ("one", "two", "three")


async def scrape(url: str) -> Samples:
    """Every sample of a Prometheus text answer, by name and labels."""
    async with httpx.AsyncClient(timeout=10) as http:
        answer = await http.get(url)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def get(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def grew(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return get(after, name, **labels) - get(before, name, **labels)


@pytest.fixture
async def scraped_stack(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> AsyncIterator[tuple[Settings, HelperClient, HelperStore]]:
    """The e2e stack with both metrics endpoints on: the worker's client carries a runtime that serves the SDK's
    metrics, exactly as `python worker.py` builds it."""
    async with running_core(tmp_path / "core.sqlite3") as core_url, running_chat() as chat_url:
        settings = settings_for(tmp_path, core_url, chat_url, follow=E2E_FOLLOW).model_copy(
            update={"health_bind": f"127.0.0.1:{free_port()}", "metrics_bind": f"127.0.0.1:{free_port()}"}
        )
        client = await Client.connect(
            dev_env.client.service_client.config.target_host,
            namespace=dev_env.client.namespace,
            data_converter=dev_env.client.data_converter,
            runtime=_runtime(settings),
        )
        store = await HelperStore.connect(settings.store, run_migrations=True)
        try:
            async with running_worker(client, settings):
                yield settings, HelperClient(settings, store.reads, client), store
        finally:
            await store.close()


async def _outcome(store: HelperStore, owner: str, helper_id: str) -> OutcomeKind | None:
    row = await store.get(owner, helper_id)
    return row.outcome_kind if row is not None else None


async def test_a_scrape_shows_what_three_helpers_did(
    scraped_stack: tuple[Settings, HelperClient, HelperStore],
) -> None:
    settings, client, store = scraped_stack
    assert settings.health_bind and settings.metrics_bind
    application = f"http://{settings.health_bind}/metrics"
    owner = "metrics-anna"
    before = await scrape(application)

    # Long enough steps that all three are still open when the fourth asks.
    task = scripted_task("Find the Q3 report.", steps=3, step_ms=1_000)
    for helper_id in HELPERS:
        assert (await client.start(helper_request(owner, helper_id, task))).status == "running"
    with pytest.raises(HelperRefused):
        await client.start(helper_request(owner, "fourth", task))
    for helper_id in HELPERS:
        kind = await eventually(functools.partial(_outcome, store, owner, helper_id), timeout=60)
        assert kind is OutcomeKind.COMPLETED

    after = await scrape(application)
    assert grew(before, after, "helper_runtime_outcomes_total", kind="completed") == 3
    assert grew(before, after, "helper_runtime_time_to_outcome_seconds_count", kind="completed") == 3
    assert grew(before, after, "helper_runtime_slot_wait_seconds_count") == 3
    assert grew(before, after, "helper_runtime_admissions_total", result="admitted", reason="none") >= 3
    assert grew(before, after, "helper_runtime_admissions_total", result="refused", reason="too_many_open") == 1
    for endpoint in ("create", "snapshot"):
        assert grew(before, after, "helper_runtime_core_request_seconds_count", endpoint=endpoint) > 0, endpoint
    assert grew(before, after, "helper_runtime_follow_attempts_total") >= 3
    assert grew(before, after, "helper_runtime_store_write_seconds_count", operation="finalize") >= 3
    # Counted from this test's store, labelled with its worker's task queue.
    queue = settings.task_queue
    assert get(after, "helper_runtime_helpers", state=RowState.UNREPORTED.value, task_queue=queue) == 3
    assert get(after, "helper_runtime_helpers", state=RowState.RUNNING.value, task_queue=queue) == 0
    assert get(after, "helper_runtime_helpers_past_hard_ceiling") == 0
    assert get(after, "helper_runtime_store_up") == 1

    # The outbox tells the chat; the delivery shows on a later scrape.
    async def delivered() -> bool:
        return grew(before, await scrape(application), "helper_runtime_chat_deliveries_total", state="delivered") >= 1

    await eventually(delivered, timeout=30, interval=0.5)

    # The SDK's own metrics answer on their port (what the ServiceMonitor's first endpoint scrapes).
    sdk = await scrape(f"http://{settings.metrics_bind}/metrics")
    assert any(name.startswith("temporal_") for name, _ in sdk), sorted({name for name, _ in sdk})[:20]
