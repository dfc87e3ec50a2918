"""What the worker's garbage collector scans (R46, R48).

A replica full of follows holds hundreds of thousands of objects that live for seconds to minutes: each follow's
activity, its connection, and the coroutines of its long poll, which waits up to 20 s. They outlive the young
collections, so CPython promotes them to its oldest generation, and its automatic full collections scan them all
while the event loop stands still (half a second to a second at 2,000 follows here, about every 20 s) to find the
few hundred objects a minute that became garbage in a reference cycle. So the collector is told what lives:

- the young collections run as CPython runs them (each well under 100 ms);
- automatic full collections are off; instead, every FREEZE_EVERY_S, the young generations are collected and
  everything alive is frozen (`gc.freeze()`): the imports, clients and pools at start, the follows since;
- a frozen object is still freed when its last reference goes (reference counting does not look at generations);
  only one that becomes garbage in a cycle stays, until it is unfrozen. So once the frozen objects have grown by
  DEEP_CLEAN_GROWTH since everything was last scanned, they are unfrozen and everything is collected once: the
  one long pause, which `helper_runtime_gc_pause_seconds{generation="2"}` shows.

Freezing less often keeps fewer short-lived cycles frozen (what is in flight at each freeze), so the long pauses
come seldom; more often, the frozen ones would grow faster. Measured goal: at its advertised 2,000 follows a
replica's event loop stands still over 100 ms only for that scan, about hourly, and observation (core step to
row) stays within 200 ms at p99 (`python -m tools.bench.capacity --window-s 600`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator
from dataclasses import dataclass

from observability.metrics import GC_FROZEN_OBJECTS

FREEZE_EVERY_S = 120.0
# How much the frozen objects may grow (new long-lived objects, and the cyclic garbage among them) before everything
# is scanned once more.
DEEP_CLEAN_GROWTH = 0.5
# No automatic full collection: CPython runs one only once its oldest generation has seen this many collections of
# the next one, which at a replica's pace is never between two freezes.
NO_FULL_COLLECTIONS = 1_000_000


@dataclass
class _Heap:
    baseline: int = 0  # frozen objects when everything was last scanned


_heap = _Heap()


def _scan_everything() -> None:
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    _heap.baseline = gc.get_freeze_count()
    GC_FROZEN_OBJECTS.set(_heap.baseline)


def _freeze_what_lives() -> None:
    gc.collect(1)
    gc.freeze()
    frozen = gc.get_freeze_count()
    GC_FROZEN_OBJECTS.set(frozen)
    if frozen > _heap.baseline * (1 + DEEP_CLEAN_GROWTH):
        _scan_everything()


async def _now_and_then() -> None:
    while True:
        await asyncio.sleep(FREEZE_EVERY_S)
        _freeze_what_lives()


@contextlib.asynccontextmanager
async def keeping_the_heap() -> AsyncIterator[None]:
    """From now on, full collections only when this module runs them; as before once the block ends."""
    thresholds = gc.get_threshold()
    gc.set_threshold(thresholds[0], thresholds[1], NO_FULL_COLLECTIONS)
    _scan_everything()
    keeper = asyncio.create_task(_now_and_then())
    try:
        yield
    finally:
        keeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeper
        gc.set_threshold(*thresholds)
        gc.unfreeze()
