"""What the worker's garbage collector scans (R46, R48).

A replica full of follows holds hundreds of thousands of objects that live for seconds to minutes: each follow's
activity, its connection, and the coroutines of its long poll, which waits up to 20 s. They outlive the young
collections, so CPython promotes them to its oldest generation, and each full collection scans them all while the
event loop stands still (half a second to a second at 2,000 follows here, about every 20 s) to find the few hundred
objects a minute that became garbage in a reference cycle. So the collector is told what lives, with `gc.freeze()`:
at start (the imports, clients and pools), and after every collection of the older young generation, what it left
alive. Full collections then scan only what was promoted since, and the young collections stay as they are.

A frozen object is still freed when its last reference goes (reference counting does not look at the
generations); only one that later becomes garbage in a cycle stays, until it is unfrozen. The cleaner
(`keeping_the_heap`) bounds that: once the frozen objects have grown by DEEP_CLEAN_GROWTH since everything was last
scanned (it looks every DEEP_CLEAN_LOOK_S), it unfreezes them and collects everything once (one long pause, which
`helper_runtime_gc_pause_seconds` shows), then freezes what is left.

Measured goal: a replica at its advertised 2,000 follows keeps every other pause of its event loop under 100 ms and
observation (core step to row) within 200 ms at p99 (`python -m tools.bench.capacity`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from observability.metrics import GC_FROZEN_OBJECTS

# How much the frozen objects may grow (new long-lived objects, and the cyclic garbage among them) before everything
# is scanned once more, and how often the cleaner looks.
DEEP_CLEAN_GROWTH = 0.5
DEEP_CLEAN_LOOK_S = 60.0


@dataclass
class _Heap:
    baseline: int = 0  # frozen objects when everything was last scanned


_heap = _Heap()


def _freeze_survivors(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info.get("generation", 0) >= 1:
        gc.freeze()


def _scan_everything() -> None:
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    _heap.baseline = gc.get_freeze_count()
    GC_FROZEN_OBJECTS.set(_heap.baseline)


async def _clean_now_and_then() -> None:
    while True:
        await asyncio.sleep(DEEP_CLEAN_LOOK_S)
        frozen = gc.get_freeze_count()
        GC_FROZEN_OBJECTS.set(frozen)
        if frozen > _heap.baseline * (1 + DEEP_CLEAN_GROWTH):
            _scan_everything()


@contextlib.asynccontextmanager
async def keeping_the_heap() -> AsyncIterator[None]:
    """From now on, freeze what lives (everything alive now, then each collection's survivors) and clean now and
    then; as before once the block ends."""
    _scan_everything()
    gc.callbacks.append(_freeze_survivors)
    cleaner = asyncio.create_task(_clean_now_and_then())
    try:
        yield
    finally:
        cleaner.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await cleaner
        gc.callbacks.remove(_freeze_survivors)
        gc.unfreeze()
