"""R51: the burst bench's breakdown of where an admission waits (tools/bench/burst.py): each hop read from a history's
event times, as a real history orders them."""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from tools.bench.burst import bucket_quantile, buckets_of, hops_of

E = EventType


def _history(*timed: tuple[EventType.ValueType, float]) -> list[HistoryEvent]:
    events = []
    for kind, seconds in timed:
        event = HistoryEvent(event_type=kind)
        event.event_time.FromMicroseconds(int(seconds * 1e6))
        events.append(event)
    return events


def test_each_task_and_the_first_activity_have_their_dispatch_and_run() -> None:
    events = _history(
        (E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, 10.0),
        (E.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, 10.0),
        (E.EVENT_TYPE_WORKFLOW_TASK_STARTED, 10.25),
        (E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, 10.3),
        (E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, 10.3),
        (E.EVENT_TYPE_ACTIVITY_TASK_STARTED, 10.31),
        (E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, 10.4),
        (E.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, 10.4),
        (E.EVENT_TYPE_WORKFLOW_TASK_STARTED, 12.4),
        (E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, 12.5),
        (E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, 13.0),  # a second activity is not the first's
        (E.EVENT_TYPE_ACTIVITY_TASK_STARTED, 19.0),
    )
    hops = {hop: round(seconds, 3) for hop, seconds in hops_of(events, "coordinator", 2).items()}
    assert hops == {
        "coordinator's task 1: dispatch": 0.25,
        "coordinator's task 1: run": 0.05,
        "coordinator's task 2: dispatch": 2.0,
        "coordinator's task 2: run": 0.1,
        "coordinator's first activity: dispatch": 0.01,
        "coordinator's first activity: run": 0.09,
        "coordinator's start -> its first task started": 0.25,
    }


def test_a_task_not_yet_done_has_only_what_happened() -> None:
    events = _history((E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, 1.0), (E.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, 1.0))
    assert hops_of(events, "helper", 1) == {}


def test_a_quantile_of_the_services_histogram_interpolates_inside_its_bucket() -> None:
    """R51: the service's write hops are read from its cumulative buckets as Prometheus reads them."""
    page = {
        'helper_api_write_wait_seconds_bucket{le="0.1"}': 10.0,
        'helper_api_write_wait_seconds_bucket{le="1.0"}': 30.0,
        'helper_api_write_wait_seconds_bucket{le="+Inf"}': 40.0,
        "helper_api_write_wait_seconds_count": 40.0,
    }
    buckets = buckets_of(page, "helper_api_write_wait_seconds")
    assert buckets == [(0.1, 10.0), (1.0, 30.0), (float("inf"), 40.0)]
    assert bucket_quantile(buckets, 0.25) == 0.1
    assert abs(bucket_quantile(buckets, 0.5) - 0.55) < 1e-9  # halfway through the 0.1-1 s bucket
    assert bucket_quantile(buckets, 0.99) == 1.0  # past the last finite bound: its bound, as Prometheus says
    assert bucket_quantile([], 0.5) != bucket_quantile([], 0.5)  # no writes: NaN
