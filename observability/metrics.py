"""The catalogue of the helper runtime's application metrics, in Prometheus conventions.

Declarations only. They are updated where each event happens, through `observability/recording.py` (never from
workflow code, which replays): admissions in the `admit_helper` activity and, refused, by the worker interceptor of
`protocol/refusals.py`; outcomes, slot wait and time to outcome in `finalize_outcome`; chat deliveries in the chat
activities; core requests and errors by decorators on `CoreClient`'s methods; store writes and conflicts by
decorators on `HelperStore`'s writes; follow attempts in `follow_session`; the event loop's pauses (garbage
collections, lag) by `observability/pauses.py`. The store-derived gauges (helpers by state, past the hard ceiling,
store up) are counted from the store on each scrape (`replica/health.py`, `StoreGauges`, bounded by 2 s). Every
metric lives in `REGISTRY`, a registry of its own rather than prometheus-client's global one, so importing this module
never adds series to another registry and tests can read exactly these metrics. The worker serves it on
HELPER_HEALTH_BIND's /metrics (replica/health.py); the Temporal SDK serves its own metrics on HELPER_METRICS_BIND;
docs/operations.md "Metrics" lists them all.

The dashboard (deploy/grafana/helper-runtime.json) and the alert rules (deploy/k8s/prometheus-rules.yaml) use these
names; tests/deploy checks that every `helper_runtime_*` name they use is declared here.

Label values are small closed sets (never owner or helper ids, which would make a series per person):

- `state` of helpers: waiting, running, unreported, delivered, closed (the row states).
- `result` of admissions: admitted, refused; `reason`: the refusal code (too_many_open, rows_full, ...) or
  `none` when admitted.
- `kind` of outcomes: completed, partial, question, authorization, failed, interrupted, closed.
- `state` of chat deliveries: how an offer of a system event ended (delivered, failed, uncertain), or
  withdrawn.
- `endpoint` of core requests: the session API's operation (create, snapshot, finish, cancel, reset,
  models; the recovery's create by key counts as create); `kind` of core errors: timeout, connect, status,
  malformed, other.
- `operation` of store writes: the write (admit, open, progress, finalize, close, coordinator, remove, usage,
  chat_event, park, keep, replica; state for a row write outside those activities).
- A value outside these sets (a bug) is recorded as `other`, never as a new series and never as an error.

"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PREFIX: Final = "helper_runtime"

REGISTRY: Final = CollectorRegistry(auto_describe=True)

# Buckets sized to the seed's times: a slot may be waited for, and a helper may run, up to its 47-minute hard
# ceiling (45 min deadline + 2 min grace), so the top buckets sit at those marks.
_LONG_SECONDS: Final = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 2700.0, 2820.0, 3600.0)
# A core call is bounded by HELPER_CHECK_MS (15 s), a long-poll read by that plus HELPER_LONG_POLL_MS (20 s).
_CORE_SECONDS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0)
# Store writes are small single-row statements; seconds mean the database is in trouble.
_STORE_SECONDS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

HELPERS: Final = Gauge(
    "helper_runtime_helpers",
    "Helpers by row state, as the store last counted them.",
    ["state", "task_queue"],
    registry=REGISTRY,
)
ADMISSIONS: Final = Counter(
    "helper_runtime_admissions",
    "Admission decisions: admitted, or refused with the refusal code as the reason.",
    ["result", "reason"],
    registry=REGISTRY,
)
SLOT_WAIT_SECONDS: Final = Histogram(
    "helper_runtime_slot_wait_seconds",
    "Time from admission to the helper getting a running slot.",
    buckets=_LONG_SECONDS,
    registry=REGISTRY,
)
TIME_TO_OUTCOME_SECONDS: Final = Histogram(
    "helper_runtime_time_to_outcome_seconds",
    "Time from getting a slot to the outcome being final, by outcome kind.",
    ["kind"],
    buckets=_LONG_SECONDS,
    registry=REGISTRY,
)
OUTCOMES: Final = Counter(
    "helper_runtime_outcomes",
    "Outcomes finalized, by kind.",
    ["kind"],
    registry=REGISTRY,
)
CHAT_DELIVERIES: Final = Counter(
    "helper_runtime_chat_deliveries",
    "System events to the chat that reached a final state, by that state.",
    ["state"],
    registry=REGISTRY,
)
CORE_REQUEST_SECONDS: Final = Histogram(
    "helper_runtime_core_request_seconds",
    "Duration of HTTP requests to the core, by session API endpoint (long-poll reads included).",
    ["endpoint"],
    buckets=_CORE_SECONDS,
    registry=REGISTRY,
)
CORE_ERRORS: Final = Counter(
    "helper_runtime_core_errors",
    "Core requests that failed or were answered with something malformed, by endpoint and kind of error.",
    ["endpoint", "kind"],
    registry=REGISTRY,
)
STORE_WRITE_SECONDS: Final = Histogram(
    "helper_runtime_store_write_seconds",
    "Duration of store writes, by operation.",
    ["operation"],
    buckets=_STORE_SECONDS,
    registry=REGISTRY,
)
STORE_CONFLICTS: Final = Counter(
    "helper_runtime_store_conflicts",
    "Row writes not applied because the stored generation was newer (a retried or late write, R19).",
    registry=REGISTRY,
)
FOLLOW_ATTEMPTS: Final = Counter(
    "helper_runtime_follow_attempts",
    "Attempts of the follow activity started (one per HELPER_FOLLOW_WINDOW_MS per running helper, plus retries).",
    registry=REGISTRY,
)
HELPERS_PAST_HARD_CEILING: Final = Gauge(
    "helper_runtime_helpers_past_hard_ceiling",
    "Helpers still running past their hard ceiling (deadline + grace); should always be 0 (R35).",
    registry=REGISTRY,
)
STORE_UP: Final = Gauge(
    "helper_runtime_store_up",
    "1 when the store answered the worker's last check, 0 when it did not.",
    registry=REGISTRY,
)

# What stops the worker's event loop: a garbage collection, or a callback that runs long. The seconds a long poll's
# answer waits to be seen (R44's 200 ms) sit in the middle of these buckets.
_PAUSE_SECONDS: Final = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5)
GC_PAUSE_SECONDS: Final = Histogram(
    "helper_runtime_gc_pause_seconds",
    "Each garbage collection of the worker's Python process, by generation (2 is a full collection): the event "
    "loop stands still meanwhile.",
    ["generation"],
    buckets=_PAUSE_SECONDS,
    registry=REGISTRY,
)
GC_FROZEN_OBJECTS: Final = Gauge(
    "helper_runtime_gc_frozen_objects",
    "Objects the garbage collector no longer scans (replica/collector.py): what lives long, and any cyclic garbage "
    "among it until the next full scan of everything.",
    registry=REGISTRY,
)
EVENT_LOOP_LAG_SECONDS: Final = Histogram(
    "helper_runtime_event_loop_lag_seconds",
    "How late the worker's event loop ran a timer due every 100 ms: a collection or a long callback held it.",
    buckets=_PAUSE_SECONDS,
    registry=REGISTRY,
)
