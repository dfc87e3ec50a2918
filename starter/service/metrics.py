"""The service's own metrics, served at its /metrics: requests by route and status, their latency, the writes'
wait for a place in the gate (starter.backpressure) and their time in Temporal, and the live-lines streams open.
Routes are the path templates (`/v1/owners/{owner}/helpers`), never owner or helper ids, which would make a series
per person."""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY: Final = CollectorRegistry(auto_describe=True)

REQUESTS: Final = Counter(
    "helper_api_requests",
    "Requests answered, by route template, method and HTTP status.",
    ["route", "method", "status"],
    registry=REGISTRY,
)
REQUEST_SECONDS: Final = Histogram(
    "helper_api_request_seconds",
    "Time to answer a request (to the end of the body; a live-lines stream counts until it ends), by route.",
    ["route", "method"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
    registry=REGISTRY,
)
# A burst's writes wait seconds for their place, and Temporal answers one in tens of milliseconds at rest.
WRITE_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30)
WRITE_WAIT_SECONDS: Final = Histogram(
    "helper_api_write_wait_seconds",
    "Time a write that went through waited for its place among the writes in flight before it was sent.",
    buckets=WRITE_BUCKETS,
    registry=REGISTRY,
)
WRITE_SEND_SECONDS: Final = Histogram(
    "helper_api_write_send_seconds",
    "Time from a write's sending to Temporal's answer (the coordinator's update, with its start if new).",
    buckets=WRITE_BUCKETS,
    registry=REGISTRY,
)
WATCHES: Final = Gauge("helper_api_watches", "Live-lines streams open now.", registry=REGISTRY)

# A request that matched no route is counted under this template, so unknown paths make no new series.
UNMATCHED_ROUTE: Final = "unmatched"


def observe_write(waited_s: float, sent_s: float) -> None:
    WRITE_WAIT_SECONDS.observe(waited_s)
    WRITE_SEND_SECONDS.observe(sent_s)
