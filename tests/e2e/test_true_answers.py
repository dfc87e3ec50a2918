"""Every write is answered within its bound, and the answer is true (R48), on the dev server with real clocks.

"Not taken" is a promise about the future: a write that Temporal did not accept before its answer was due is
refused by the coordinator if it arrives later (its accept-by time travels in its update id). These tests stop
the worker, so nothing accepts a write in time, ask, and then bring a worker back to see that what the starter
called not taken is never taken.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from domain.rows import RowState
from protocol.errors import Unavailable
from protocol.names import coordinator_id
from reference.chat.server import running_chat
from reference.core.script import scripted_task
from reference.core.server import running_core
from starter.client import HelperClient
from starter.service.connections import Connections
from store.helper_store import HelperStore
from tests.e2e.conftest import E2E_FOLLOW
from tests.helpers import eventually, helper_request, rows_of, service_client, settings_for
from worker import running_worker

pytestmark = pytest.mark.e2e

BOUND_MS = 3_000


async def _update_events(env: WorkflowEnvironment, owner: str) -> list[EventType.ValueType]:
    history = await env.client.get_workflow_handle(coordinator_id(owner)).fetch_history()
    return [event.event_type for event in history.events]


async def test_what_the_starter_called_not_taken_is_never_taken(dev_env: WorkflowEnvironment, tmp_path: Path) -> None:
    """R48, R4, R21: with no worker, a start and a close are answered `unavailable` within the bound (not 30 s, not
    never); once a worker is back, neither is carried out: no row for the start, the helper still running for the
    close, and the coordinator's history accepted neither. Asking again then works at once."""
    async with running_core(tmp_path / "core.sqlite3") as core_url, running_chat() as chat_url:
        settings = settings_for(tmp_path, core_url, chat_url, follow=E2E_FOLLOW)
        settings = settings.model_copy(update={"starter_timeout_ms": BOUND_MS})
        store = await HelperStore.connect(settings.store, run_migrations=True)
        client = HelperClient(settings, store.reads, dev_env.client)
        owner = f"owner-{uuid.uuid4().hex[:8]}"
        long_task = scripted_task("Long work.", steps=200, step_ms=500)
        try:
            async with running_worker(dev_env.client, settings):
                await client.start(helper_request(owner, "running", long_task))
                accepted_before = (await _update_events(dev_env, owner)).count(
                    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
                )
            # No worker polls now.
            for ask in (
                lambda: client.start(helper_request(owner, "late", long_task)),
                lambda: client.close(owner, "running"),
            ):
                started = time.monotonic()
                with pytest.raises(Unavailable) as not_taken:
                    await ask()
                assert time.monotonic() - started < BOUND_MS / 1000 + 1.0, "answered within the bound"
                assert "nothing was taken" in not_taken.value.message
                assert not_taken.value.retry_after_s is not None and not_taken.value.retry_after_s >= 1
            async with running_worker(dev_env.client, settings):
                # The worker's first task of the coordinator meets both updates, past their accept-by time.
                await asyncio.sleep(3)
                events = await _update_events(dev_env, owner)
                accepted = events.count(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED)
                assert accepted == accepted_before, "neither late update was accepted"
                assert await store.get(owner, "late") is None, "the start that was not taken wrote nothing"
                row = await store.get(owner, "running")
                assert row is not None and row.state is RowState.RUNNING, "the close that was not taken closed nothing"
                # Asked again, both are taken at once.
                admission = await client.start(helper_request(owner, "late", long_task))
                assert not admission.existing and admission.status is RowState.RUNNING
                closed = await client.close(owner, "running")
                assert closed.state is RowState.CLOSED and not closed.already_closed
                await eventually(lambda: _final(store, owner, "running"), timeout=30)
                await client.close(owner, "late")
                await eventually(lambda: _final(store, owner, "late"), timeout=30)
        finally:
            await store.close()


async def _final(store: HelperStore, owner: str, helper_id: str) -> bool:
    row = await store.get(owner, helper_id)
    return row is not None and row.outcome_kind is not None


def _sample(page: httpx.Response, name: str) -> float:
    """One unlabelled sample of a Prometheus text page."""
    for line in page.text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    return 0.0


async def test_the_service_refuses_what_it_cannot_answer_in_time_before_sending_it(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """R48, R47, R51: one write in flight at most, no worker: the first start is answered 503 `unavailable` at its
    bound, the ones behind it 429 `busy` with a Retry-After once they waited half their bound, none sent to
    Temporal; the service's metrics count the one write sent, its wait and its time in Temporal; with a worker
    back, none of them was taken."""
    async with running_core(tmp_path / "core.sqlite3") as core_url, running_chat() as chat_url:
        settings = settings_for(tmp_path, core_url, chat_url, follow=E2E_FOLLOW)
        settings = settings.model_copy(update={"starter_timeout_ms": 2_000, "starter_max_in_flight": 1})
        store = await HelperStore.connect(settings.store, run_migrations=True)
        owner = f"owner-{uuid.uuid4().hex[:8]}"
        try:
            async with service_client(settings, Connections(settings, 2, temporal=dev_env.client)) as http:
                body = {"task": "Find the Q3 report.", "model": "scripted"}

                async def start(helper_id: str) -> tuple[httpx.Response, float]:
                    started = time.monotonic()
                    answer = await http.post(f"/v1/owners/{owner}/helpers", json={**body, "helper_id": helper_id})
                    return answer, time.monotonic() - started

                before = await http.get("/metrics")
                answers = await asyncio.gather(*(start(f"h{n}") for n in range(4)))
                statuses = sorted(answer.status_code for answer, _ in answers)
                assert statuses == [429, 429, 429, 503], [answer.text for answer, _ in answers]
                for answer, seconds in answers:
                    assert seconds < 3.0, "answered within the bound"
                    assert int(answer.headers["Retry-After"]) >= 1
                    error = answer.json()["error"]
                    assert error["code"] in ("busy", "unavailable") and error["retry_after_s"] >= 1
                    assert "nothing was taken" in error["message"]
                page = await http.get("/metrics")
                sent, in_temporal = (
                    _sample(page, name) - _sample(before, name)
                    for name in ("helper_api_write_send_seconds_count", "helper_api_write_send_seconds_sum")
                )
                assert sent == 1, "one write was sent"
                assert in_temporal >= 0.9, "and was in Temporal until its bound"
            async with running_worker(dev_env.client, settings):
                await asyncio.sleep(3)
                assert await rows_of(store, owner) == [], "nothing refused or unavailable was taken"
        finally:
            await store.close()
