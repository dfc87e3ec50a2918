"""An event loop on a clock of its own, which moves only when every task waits: a sleep of 0.3 s takes no real time
and a burst ends at the same moment on a loaded machine as on an idle one, so a test of timing asserts exact times.

Timers due at the very same moment fire in no set order (asyncio keeps them in a heap), where a real clock would have
moved on a little between setting them: tasks whose order matters start a microsecond apart."""

from __future__ import annotations

import asyncio
import functools
import selectors
from collections.abc import Callable, Coroutine
from typing import Any


class _Skipping(selectors.DefaultSelector):
    """Never blocks: where the loop would sleep until its next timer, the clock jumps to that timer instead."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = super().select(0)
        if not events:
            if timeout is None:  # no timer set and nothing ready: the real loop would wait forever
                raise RuntimeError("every task waits and no timer is set: the test would hang")
            self.now += timeout
        return events


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """`time()` is the virtual clock: `asyncio.sleep`, `asyncio.timeout` and `call_later` all run on it."""

    def __init__(self) -> None:
        self._skipping = _Skipping()
        super().__init__(self._skipping)

    def time(self) -> float:
        return self._skipping.now


def in_virtual_time(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Run an async test on a `VirtualTimeLoop` of its own, its clock at 0 when it starts (pytest sees a plain
    function, so the session's loop is not used)."""

    @functools.wraps(test)
    def run() -> None:
        with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
            runner.run(test())

    return run
