"""What stops the worker's event loop, measured where it happens: every garbage collection's duration (through
`gc.callbacks`) and the loop's lag (a timer due every LAG_TICK_S, and how late it ran). A follow's long poll is
answered by the core at once, but the worker sees the answer only when its loop runs again, so these pauses are
what observation (R44) waits on beyond the network. The figures go to `observability.metrics` (`gc_pause`,
`event_loop_lag`); the capacity bench prints them (docs/performance.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import AsyncIterator
from typing import Any

from observability.metrics import EVENT_LOOP_LAG_SECONDS, GC_PAUSE_SECONDS

LAG_TICK_S = 0.1

_started: dict[int, float] = {}


def _on_collection(phase: str, info: dict[str, Any]) -> None:
    generation = int(info.get("generation", 0))
    if phase == "start":
        _started[generation] = time.perf_counter()
    elif generation in _started:
        GC_PAUSE_SECONDS.labels(str(generation)).observe(time.perf_counter() - _started.pop(generation))


async def _measure_lag() -> None:
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + LAG_TICK_S
        await asyncio.sleep(LAG_TICK_S)
        EVENT_LOOP_LAG_SECONDS.observe(max(0.0, loop.time() - due))


@contextlib.asynccontextmanager
async def watching_pauses() -> AsyncIterator[None]:
    """Measure collections and the loop's lag while the block runs."""
    if _on_collection not in gc.callbacks:
        gc.callbacks.append(_on_collection)
    lag = asyncio.create_task(_measure_lag())
    try:
        yield
    finally:
        lag.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await lag
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(_on_collection)
