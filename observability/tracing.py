"""Tracing with OpenTelemetry: off unless configured, and then one trace per request across processes.

With HELPER_TRACING=true, or an OTLP endpoint set (OTEL_EXPORTER_OTLP_ENDPOINT or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) and HELPER_TRACING not false, `install` sets up a tracer provider that exports
over OTLP/HTTP, and every Temporal client connected afterwards (`protocol.connection`) carries the SDK's
`TracingInterceptor`: the starter's update-with-start, the coordinator's update handler, the helper workflow's
run, its activities, and (`core_span`) each core HTTP call share one trace. The exporter reads its own OTEL_*
variables (endpoint, headers, timeout); the process's name is the caller's (`Settings.tracing_name`).

Nothing from opentelemetry is imported until tracing is on: the starter's writes keep their import cost (R43)
and, with tracing off, `interceptors()` is empty and `core_span` returns one shared no-op context.
"""

from __future__ import annotations

import contextlib
from types import TracebackType
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer
    from temporalio.client import Interceptor

# A flush at shutdown waits at most this long for the collector, so a collector that is down delays a starter
# write or a worker's exit by this at most.
FLUSH_TIMEOUT_MS: Final = 3_000
INSTRUMENTATION: Final = "helper_runtime"

_NO_SPAN: Final = contextlib.nullcontext()
_tracer: Tracer | None = None  # None: tracing is off
_provider: TracerProvider | None = None


def install(enabled: bool, service_name: str, provider: TracerProvider | None = None) -> bool:
    """Turn tracing on if `enabled` (the settings' `tracing_enabled`), or with `provider` (e.g. a test's in-memory
    exporter); returns whether it is on. Idempotent: the first installation wins until `shutdown`."""
    global _tracer, _provider
    if _tracer is not None:
        return True
    if provider is None:
        if not enabled:
            return False
        provider = _otlp_provider(service_name)
    _provider = provider
    _tracer = provider.get_tracer(INSTRUMENTATION)
    return True


def enabled() -> bool:
    return _tracer is not None


def interceptors() -> list[Interceptor]:
    """The client interceptors for a Temporal connection: the SDK's tracing interceptor when tracing is on
    (a worker built on that client gets its worker half too), else none."""
    if _tracer is None:
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [TracingInterceptor(_tracer)]


def core_span(method: str, path: str) -> contextlib.AbstractAsyncContextManager[None]:
    """A client span around one core HTTP call, a child of the activity's span; a shared no-op when off."""
    if _tracer is None:
        return _NO_SPAN
    return _CoreSpan(_tracer, method, path)


def shutdown(timeout_ms: int = FLUSH_TIMEOUT_MS) -> None:
    """Export what is buffered, waiting at most `timeout_ms`, and turn tracing off. The provider's own shutdown
    is skipped: it may wait 30 s per processor, and the exporter's thread is a daemon."""
    global _tracer, _provider
    provider, _tracer, _provider = _provider, None, None
    if provider is not None:
        provider.force_flush(timeout_millis=timeout_ms)


class _CoreSpan:
    """`async with` around the tracer's (synchronous) span context, so the client adds it in one line."""

    __slots__ = ("_context", "_method", "_path", "_tracer")

    def __init__(self, tracer: Tracer, method: str, path: str) -> None:
        self._tracer, self._method, self._path = tracer, method, path
        self._context: contextlib.AbstractContextManager[Span] | None = None

    async def __aenter__(self) -> None:
        from opentelemetry.trace import SpanKind

        # The name is the method only: paths carry session ids, and span names should be few.
        self._context = self._tracer.start_as_current_span(
            f"core {self._method}",
            kind=SpanKind.CLIENT,
            attributes={"http.request.method": self._method, "url.path": self._path},
        )
        self._context.__enter__()

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        assert self._context is not None
        self._context.__exit__(kind, error, trace)


def _otlp_provider(service_name: str) -> TracerProvider:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # shutdown_on_exit=False: no atexit hook that could wait 30 s; `shutdown` flushes with a bound instead.
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service_name}), shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider
