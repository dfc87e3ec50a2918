"""The application metrics (observability/): every update with the label values it can be given, the store
gauges, and /metrics on the health endpoint. Each test reads the series before and after, so the process-wide
registry's other contents do not matter."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from clients.core_client import CoreClient, CoreError
from domain.book import EventState, RefusalCode
from domain.limits import Limits
from domain.outcome import OutcomeKind
from domain.rows import HelperRow, RowState
from observability import recording
from observability.metrics import REGISTRY
from protocol.errors import ErrorType
from protocol.names import ADMIT
from protocol.refusals import refusal_reason
from replica.health import StoreGauges, serving_health
from store.helper_store import HelperStore
from tests.fakes.answering_server import serving_answers
from tests.helpers import admitted_row, free_port

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
SESSION = "s-1"


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def delta(name: str, change: Callable[[], object], **labels: str) -> float:
    before = value(name, **labels)
    change()
    return value(name, **labels) - before


# --- label values ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(OutcomeKind))
def test_an_outcome_counts_its_kind_its_slot_wait_and_its_time_to_outcome(kind: OutcomeKind) -> None:
    started, finished = T0 + timedelta(seconds=30), T0 + timedelta(minutes=5)
    waits = value("helper_runtime_slot_wait_seconds_sum")
    took = value("helper_runtime_time_to_outcome_seconds_sum", kind=kind.value)
    assert (
        delta("helper_runtime_outcomes_total", lambda: recording.finalized(kind, T0, started, finished), kind=kind) == 1
    )
    # Sums of float seconds: the registry is shared by the whole test session, so compare within rounding.
    assert value("helper_runtime_slot_wait_seconds_sum") - waits == pytest.approx(30)
    assert value("helper_runtime_time_to_outcome_seconds_sum", kind=kind.value) - took == pytest.approx(270)


def test_an_outcome_without_a_slot_counts_no_wait() -> None:
    """Closed while waiting: the outcome counts, but it never got a slot to wait for or to run in."""
    waits = value("helper_runtime_slot_wait_seconds_count")
    finalize = lambda: recording.finalized(OutcomeKind.CLOSED, T0, None, T0)  # noqa: E731
    assert delta("helper_runtime_outcomes_total", finalize, kind="closed") == 1
    assert value("helper_runtime_slot_wait_seconds_count") == waits


def test_an_unknown_label_value_is_counted_as_other_and_never_raises() -> None:
    finalize = lambda: recording.finalized("exploded", T0, T0, T0)  # noqa: E731
    assert delta("helper_runtime_outcomes_total", finalize, kind="other") == 1
    refuse = lambda: recording.refused("bogus")  # noqa: E731
    assert delta("helper_runtime_admissions_total", refuse, result="refused", reason="other") == 1


def test_the_closed_label_sets_are_the_domains_names() -> None:
    """Observability spells its label values itself (it imports no layer); they are the domain's names."""
    assert {kind.value for kind in OutcomeKind} == recording.OUTCOME_KINDS
    assert {code.value for code in RefusalCode} == recording.REFUSAL_REASONS
    assert {state.value for state in EventState} - {"pending", "attempting"} == recording.FINAL_CHAT_STATES


def test_admissions_count_once_per_row_written() -> None:
    admit = lambda: (recording.admitted(True), recording.admitted(False))  # noqa: E731
    assert delta("helper_runtime_admissions_total", admit, result="admitted", reason="none") == 1


@pytest.mark.parametrize("code", list(RefusalCode))
def test_each_refusal_code_is_its_own_reason(code: RefusalCode) -> None:
    refuse = lambda: recording.refused(code.value)  # noqa: E731
    assert delta("helper_runtime_admissions_total", refuse, result="refused", reason=code.value) == 1


def test_the_admit_updates_refusal_is_recognized_by_its_type_and_code() -> None:
    refusal = ApplicationError("no", {"code": "too_many_open", "message": "no"}, type=ErrorType.HELPER_REFUSED)
    assert refusal_reason(ADMIT, refusal) == "too_many_open"
    assert refusal_reason("close", refusal) is None
    assert refusal_reason(ADMIT, ApplicationError("busy", type=ErrorType.COORDINATOR_BUSY)) is None
    assert refusal_reason(ADMIT, ValueError("no")) is None


@pytest.mark.parametrize("state", list(EventState))
def test_only_final_chat_states_count(state: EventState) -> None:
    counted = delta("helper_runtime_chat_deliveries_total", lambda: recording.chat_delivery(state.value), state=state)
    final = state not in (EventState.PENDING, EventState.ATTEMPTING)
    assert counted == (1 if final else 0)


def test_follow_attempts_count() -> None:
    assert delta("helper_runtime_follow_attempts_total", recording.follow_attempt) == 1


# --- the core client -------------------------------------------------------------------------------------


Handler = Callable[[httpx.Request], Any]


@contextlib.asynccontextmanager
async def _core(handler: Handler | None, check_ms: int = 500) -> AsyncIterator[CoreClient]:
    """A core client of a real HTTP server that answers with `handler`; None: nothing listens at its port."""
    async with contextlib.AsyncExitStack() as stack:
        if handler is None:
            async with serving_answers(lambda request: httpx.Response(200)) as url:
                pass  # the server stopped: its port refuses connections
        else:
            url = await stack.enter_async_context(serving_answers(handler))
        core = CoreClient(url, check_ms)
        try:
            yield core
        finally:
            await core.aclose()


async def _slow(request: httpx.Request) -> httpx.Response:
    await asyncio.sleep(5)
    return httpx.Response(200, json=SNAPSHOT)


SNAPSHOT = {"session_id": SESSION, "status": "running", "steps": [], "input_tokens_total": 0}


@pytest.mark.parametrize(
    ("handler", "kind"),
    [
        (_slow, "timeout"),
        (None, "connect"),
        (lambda request: httpx.Response(503, json={"message": "restarting"}), "status"),
        (lambda request: httpx.Response(404, json={"message": "no such session"}), "status"),
        (lambda request: httpx.Response(200, text="<html>oops</html>"), "malformed"),
        (lambda request: httpx.Response(200, json={**SNAPSHOT, "session_id": "s-other"}), "malformed"),
    ],
    ids=["slow", "refused", "503", "404", "html", "another-session"],
)
async def test_core_errors_count_by_endpoint_and_kind(handler: Handler | None, kind: str) -> None:
    errors = value("helper_runtime_core_errors_total", endpoint="snapshot", kind=kind)
    requests = value("helper_runtime_core_request_seconds_count", endpoint="snapshot")
    async with _core(handler) as core:
        with pytest.raises(CoreError):
            await core.snapshot(SESSION)
    assert value("helper_runtime_core_errors_total", endpoint="snapshot", kind=kind) - errors == 1
    assert value("helper_runtime_core_request_seconds_count", endpoint="snapshot") - requests == 1


async def test_a_core_timeout_of_the_whole_call_counts_as_timeout() -> None:
    errors = value("helper_runtime_core_errors_total", endpoint="finish", kind="timeout")
    async with _core(_slow, check_ms=100) as core:
        with pytest.raises(CoreError):
            await core.finish(SESSION)
    assert value("helper_runtime_core_errors_total", endpoint="finish", kind="timeout") - errors == 1


@pytest.mark.parametrize(
    ("endpoint", "call", "answer"),
    [
        ("snapshot", lambda core: core.snapshot(SESSION), SNAPSHOT),
        ("cancel", lambda core: core.cancel(SESSION), {"stopped": True, "status": "cancelled"}),
        ("reset", lambda core: core.reset(SESSION), {"reset": True}),
        ("models", lambda core: core.models(), {"models": ["scripted"]}),
    ],
)
async def test_each_core_endpoint_is_timed_under_its_name(
    endpoint: str, call: Callable[[CoreClient], Any], answer: dict[str, Any]
) -> None:
    requests = value("helper_runtime_core_request_seconds_count", endpoint=endpoint)
    errors = sum(
        value("helper_runtime_core_errors_total", endpoint=endpoint, kind=k) for k in recording.CORE_ERROR_KINDS
    )
    async with _core(lambda request: httpx.Response(200, json=answer)) as core:
        await call(core)
    assert value("helper_runtime_core_request_seconds_count", endpoint=endpoint) - requests == 1
    assert (
        sum(value("helper_runtime_core_errors_total", endpoint=endpoint, kind=k) for k in recording.CORE_ERROR_KINDS)
        == errors
    )


# --- the store -------------------------------------------------------------------------------------------


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[HelperStore]:
    sqlite = await HelperStore.connect(f"sqlite+aiosqlite:///{tmp_path / 'helpers.sqlite3'}", run_migrations=True)
    yield sqlite
    await sqlite.close()


def row(helper_id: str, seq: int) -> HelperRow:
    return admitted_row("anna", helper_id, at=T0, seq=seq, limits=Limits(deadline_ms=600_000, grace_ms=120_000))


async def test_store_writes_are_timed_by_operation_and_stale_writes_are_conflicts(store: HelperStore) -> None:
    admits = value("helper_runtime_store_write_seconds_count", operation="admit")
    states = value("helper_runtime_store_write_seconds_count", operation="state")
    conflicts = value("helper_runtime_store_conflicts_total")
    assert await store.insert_admitted(row("h1", 1))
    assert await store.write_state("anna", "h1", 1, 3, state=RowState.RUNNING)
    assert not await store.write_state("anna", "h1", 1, 2, state=RowState.CLOSED)  # older generation: not applied
    assert value("helper_runtime_store_write_seconds_count", operation="admit") - admits == 1
    # Unnamed, write_state is `state`; an activity names it (finalize, close, ...): `names_store_writes`.
    assert value("helper_runtime_store_write_seconds_count", operation="state") - states == 2
    assert value("helper_runtime_store_conflicts_total") - conflicts == 1


async def test_a_shared_store_write_is_named_by_its_caller(store: HelperStore) -> None:
    @recording.names_store_writes("close")
    async def mark_closed() -> bool:
        return await store.write_state("anna", "h1", 1, 2, state=RowState.CLOSED)

    closes = value("helper_runtime_store_write_seconds_count", operation="close")
    states = value("helper_runtime_store_write_seconds_count", operation="state")
    assert await store.insert_admitted(row("h1", 1))
    assert await mark_closed()
    assert value("helper_runtime_store_write_seconds_count", operation="close") - closes == 1
    assert value("helper_runtime_store_write_seconds_count", operation="state") == states


async def test_the_store_gauges_count_rows_by_state_and_helpers_past_their_ceiling(store: HelperStore) -> None:
    now = datetime.now(UTC)
    await store.insert_admitted(row("waiting", 1))
    for helper_id, seq, deadline_at in (("fine", 2, now), ("stuck", 3, now - timedelta(minutes=4))):
        await store.insert_admitted(row(helper_id, seq))
        await store.write_state(
            "anna", helper_id, seq, 2, state=RowState.RUNNING, started_at=now, deadline_at=deadline_at
        )
    gauges = StoreGauges(store, "q-count", min_interval_s=0)
    await gauges.refresh()
    assert value("helper_runtime_helpers", state="waiting", task_queue="q-count") == 1
    assert value("helper_runtime_helpers", state="running", task_queue="q-count") == 2
    assert value("helper_runtime_helpers", state="delivered", task_queue="q-count") == 0
    # stuck: deadline 4 min ago + 2 min grace + 1 min margin is past; fine is not.
    assert value("helper_runtime_helpers_past_hard_ceiling") == 1
    assert value("helper_runtime_store_up") == 1


class _HangingStore:
    """A store whose reads never answer."""

    async def count_by_state(self) -> dict[str, int]:
        await asyncio.sleep(60)
        return {}

    async def running_hard_ceilings(self) -> list[datetime]:
        await asyncio.sleep(60)
        return []


async def test_a_store_that_does_not_answer_leaves_the_gauges_and_reports_down(store: HelperStore) -> None:
    await store.insert_admitted(row("waiting", 1))
    await StoreGauges(store, "q-hang", min_interval_s=0).refresh()
    assert value("helper_runtime_helpers", state="waiting", task_queue="q-hang") == 1
    hanging = StoreGauges(_HangingStore(), "q-hang", timeout_s=0.2, min_interval_s=0)  # type: ignore[arg-type]
    started = asyncio.get_running_loop().time()
    await hanging.refresh()
    assert asyncio.get_running_loop().time() - started < 1
    assert value("helper_runtime_store_up") == 0
    assert value("helper_runtime_helpers", state="waiting", task_queue="q-hang") == 1


# --- serving ---------------------------------------------------------------------------------------------


async def test_metrics_are_served_on_the_health_port_in_prometheus_format(store: HelperStore) -> None:
    port = free_port()
    await store.insert_admitted(row("waiting", 1))
    client = await Client.connect("127.0.0.1:9", lazy=True)
    gauges = StoreGauges(store, "q-serve", min_interval_s=0)
    async with serving_health(f"127.0.0.1:{port}", store, client, gauges), httpx.AsyncClient(timeout=10) as http:
        answer = await http.get(f"http://127.0.0.1:{port}/metrics")
        assert (await http.get(f"http://127.0.0.1:{port}/livez")).json()["ok"] is True
    assert answer.status_code == 200
    assert answer.headers["content-type"] == CONTENT_TYPE_LATEST
    families = {f.name: f for f in text_string_to_metric_families(answer.text)}
    # Every declared family is served (prometheus-client's text parser shows `_created` as families of their own).
    served = {name for name in families if name.startswith("helper_runtime_") and not name.endswith("_created")}
    assert served == {family.name for family in REGISTRY.collect()}
    helpers = {(s.labels["state"], s.labels["task_queue"]): s.value for s in families["helper_runtime_helpers"].samples}
    assert helpers[("waiting", "q-serve")] == 1
    assert families["helper_runtime_store_up"].samples[0].value == 1


def test_the_service_monitor_scrapes_the_sdk_port_and_the_application_path() -> None:
    """One ServiceMonitor, two endpoints: the SDK's port and /metrics on the health port, both in the Service."""
    manifests = list(yaml.safe_load_all((ROOT / "deploy" / "k8s" / "worker-metrics.yaml").read_text()))
    service = next(m for m in manifests if m["kind"] == "Service")
    monitor = next(m for m in manifests if m["kind"] == "ServiceMonitor")
    endpoints = {(e["port"], e.get("path", "/metrics")) for e in monitor["spec"]["endpoints"]}
    assert endpoints == {("metrics", "/metrics"), ("health", "/metrics")}
    assert {p["name"]: p["targetPort"] for p in service["spec"]["ports"]} == {"metrics": "metrics", "health": "health"}
