"""Tracing on the dev server with the real worker and the reference core: one helper's admission, its workflow, its
activities and its core HTTP calls are one trace, each span a child of the one that caused it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from observability import tracing
from protocol.connection import connect_temporal
from reference.chat.server import running_chat
from reference.core.server import running_core
from starter.client import HelperClient
from store.helper_store import HelperStore
from tests.e2e.conftest import E2E_FOLLOW
from tests.helpers import eventually, helper_request, settings_for
from worker import running_worker

pytestmark = pytest.mark.e2e


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing installed with an in-memory exporter (as OTEL_EXPORTER_OTLP_ENDPOINT would with OTLP)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert tracing.install(False, "helper-e2e", provider=provider)
    try:
        yield exporter
    finally:
        tracing.shutdown()


@pytest.fixture
async def traced(dev_env: WorkflowEnvironment, spans: InMemorySpanExporter) -> Client:
    """The client `protocol.connection` builds with tracing on (the worker built on it inherits the worker half)."""
    plain = dev_env.client
    client = await connect_temporal(plain.service_client.config.target_host, plain.namespace)
    assert [type(i).__name__ for i in client.config()["interceptors"]] == ["TracingInterceptor"]
    return client


async def test_one_helper_is_one_trace_from_the_starter_to_the_core(
    traced: Client, spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    owner, helper_id = f"owner-{uuid.uuid4().hex[:8]}", "traced"
    async with running_core(tmp_path / "core.sqlite3") as core_url, running_chat() as chat_url:
        settings = settings_for(tmp_path, core_url, chat_url, follow=E2E_FOLLOW)
        store = await HelperStore.connect(settings.store, run_migrations=True)
        try:
            async with running_worker(traced, settings):
                admission = await HelperClient(settings, store.reads, traced).start(helper_request(owner, helper_id))
                assert admission.status == "running"

                async def finished() -> bool:
                    row = await store.get(owner, helper_id)
                    return row is not None and row.outcome_kind is not None

                await eventually(finished, timeout=60)
        finally:
            await store.close()

    finished_spans = spans.get_finished_spans()
    by_id = {span.context.span_id: span for span in finished_spans}
    names = [span.name for span in finished_spans]

    def named(name: str) -> list[ReadableSpan]:
        return [span for span in finished_spans if span.name == name]

    (admit,) = named("StartUpdateWithStartWorkflow:CoordinatorWorkflow")
    assert admit.parent is None and admit.kind is SpanKind.CLIENT
    trace_id = admit.context.trace_id
    # The helper's calls to the core; the starter's model check (the catalog, asked before the admission through the
    # same core client) is a call of the starter's own.
    core_calls = [
        span
        for span in finished_spans
        if span.name.startswith("core ") and (span.attributes or {}).get("url.path") != "/v1/models"
    ]
    expected = {"RunWorkflow:HelperWorkflow", "RunActivity:open_session", "RunActivity:follow_session"}
    assert expected <= set(names) and core_calls, sorted(set(names))
    helper_spans = [*named("RunWorkflow:HelperWorkflow"), *named("RunActivity:open_session"), *core_calls]
    assert {span.context.trace_id for span in helper_spans} == {trace_id}, "one trace from the starter on"

    def ancestry(span: ReadableSpan) -> list[str]:
        chain = []
        while span.parent is not None:
            span = by_id[span.parent.span_id]  # every parent was exported: none is missing
            chain.append(span.name)
        return chain

    # The interceptor's workflow spans last no time: a workflow's own spans (its run, the activities it schedules,
    # its signals) are children of the span that started it. So the session's create hangs under open_session's
    # attempt → its schedule by the helper → the helper's start by the admission activity → the coordinator's
    # scheduling of that local activity (for the admit update) → the starter's update-with-start.
    admission_path = [
        "StartWorkflow:HelperWorkflow",
        "RunActivity:admit_helper",
        "StartActivity:admit_helper",
        admit.name,
    ]
    create = next(span for span in core_calls if span.attributes and span.attributes["url.path"] == "/v1/sessions")
    assert ancestry(create) == ["RunActivity:open_session", "StartActivity:open_session", *admission_path]
    (helper_run,) = named("RunWorkflow:HelperWorkflow")
    assert ancestry(helper_run) == admission_path
    assert ancestry(named("HandleUpdate:admit")[0]) == [admit.name]
    for span in core_calls:  # every core call (create, reads, reset) hangs under one of the helper's activities
        assert span.kind is SpanKind.CLIENT and span.context.trace_id == trace_id
        chain = ancestry(span)
        assert chain[0].startswith("RunActivity:") and chain[2:] == admission_path, chain
    assert {span.name for span in core_calls} >= {"core POST", "core GET"}
