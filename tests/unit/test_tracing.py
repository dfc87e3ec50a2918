"""Tracing is off unless configured: no tracer provider, no interceptor, no opentelemetry import; when on, each core
HTTP call is a span. Also the settings that turn tracing and Worker Versioning on."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from clients.core_client import CoreClient, CoreUnavailable
from config.settings import Settings, SettingsError
from observability import tracing
from tests.fakes.answering_server import serving_answers
from tests.unit.test_starter_imports import _imported_by, env  # noqa: F401  # `env`: the module's store fixture


@pytest.fixture
def in_memory() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert tracing.install(False, "test", provider=provider)
    try:
        yield exporter
    finally:
        tracing.shutdown()


def test_nothing_configured_installs_nothing() -> None:
    settings = Settings.from_env({})
    assert not settings.tracing_enabled
    assert tracing.install(settings.tracing_enabled, "helper-worker") is False
    assert not tracing.enabled()
    assert tracing.interceptors() == []
    # The core client's span is one shared no-op context: nothing is created per call.
    assert tracing.core_span("GET", "/v1/models") is tracing.core_span("POST", "/v1/sessions")
    tracing.shutdown()  # harmless when off


@pytest.mark.parametrize(
    ("env_vars", "on"),
    [
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"HELPER_TRACING": "true"}, True),
        ({"HELPER_TRACING": "false", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ""}, False),
    ],
)
def test_tracing_follows_the_otlp_endpoint_unless_told_otherwise(env_vars: dict[str, str], on: bool) -> None:
    assert Settings.from_env(env_vars).tracing_enabled is on


def test_a_bad_tracing_flag_names_the_variable() -> None:
    with pytest.raises(SettingsError, match="HELPER_TRACING"):
        Settings.from_env({"HELPER_TRACING": "maybe"})


def test_a_write_command_loads_no_opentelemetry_unless_tracing_is_configured(
    env: dict[str, str],  # noqa: F811
) -> None:
    """R43: with nothing configured a write does not import opentelemetry; with an endpoint it does (so the
    measurement works). Temporal is down: exit 3 once everything is imported."""
    down = {**env, "TEMPORAL_ADDRESS": "127.0.0.1:9", "HELPER_STARTER_TIMEOUT_MS": "3000"}
    argv = ["close", "--owner", "anna", "--id", "h1"]
    assert "opentelemetry" not in _imported_by(argv, down, exit_code=3)
    traced = {**down, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_EXPORTER_OTLP_TIMEOUT": "1"}
    assert "opentelemetry" in _imported_by(argv, traced, exit_code=3)


async def test_each_core_call_is_a_client_span(in_memory: InMemorySpanExporter) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"models": ["scripted"]})
        return httpx.Response(503, content=json.dumps({"message": "restarting"}))

    async with serving_answers(answer) as url:
        core = CoreClient(url, 1_000)
        try:
            assert await core.models() == ["scripted"]
            with pytest.raises(CoreUnavailable):
                await core.reset("s-1")
        finally:
            await core.aclose()
    spans = in_memory.get_finished_spans()
    assert [(s.name, s.kind) for s in spans] == [("core GET", SpanKind.CLIENT), ("core POST", SpanKind.CLIENT)]
    assert spans[0].attributes is not None and spans[0].attributes["url.path"] == "/v1/models"
    assert spans[0].status.status_code is StatusCode.UNSET
    assert tracing.interceptors() and type(tracing.interceptors()[0]).__name__ == "TracingInterceptor"
