"""R46, R48: the worker's collector no longer scans what lives long, and still reclaims cyclic garbage in the end
(replica/collector.py)."""

from __future__ import annotations

import gc
import weakref

from replica import collector


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> _Node:
    first, second = _Node(), _Node()
    first.other, second.other = second, first
    return first


async def test_what_lives_is_frozen_and_no_automatic_full_collection_scans_it() -> None:
    """Automatic full collections are off while the worker runs; what is alive at each freeze is frozen, and a
    frozen object is still freed when its last reference goes. Leaving the block puts everything back."""
    before = gc.get_threshold()
    async with collector.keeping_the_heap():
        assert gc.get_threshold()[2] == collector.NO_FULL_COLLECTIONS
        kept = [_Node() for _ in range(10_000)]
        collector._freeze_what_lives()
        frozen = gc.get_freeze_count()
        del kept
        assert gc.get_freeze_count() <= frozen - 10_000, "a frozen object is freed when its last reference goes"
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before


async def test_cyclic_garbage_among_frozen_objects_is_reclaimed_once_they_have_grown_enough() -> None:
    """A cycle that became garbage after it was frozen stays, until the frozen objects have grown by
    DEEP_CLEAN_GROWTH: then everything is scanned once and it goes."""
    async with collector.keeping_the_heap():
        held = _cycle()
        node = weakref.ref(held)
        collector._freeze_what_lives()
        del held  # garbage now, held only by its own cycle
        collector._freeze_what_lives()
        assert node() is not None, "frozen, the cycle is not collected"
        # Counted from what is frozen now: frozen objects that were freed since the baseline (by reference
        # counting) leave room the growth must fill too.
        room = int(collector._heap.baseline * (1 + collector.DEEP_CLEAN_GROWTH)) - gc.get_freeze_count()
        growth = [_Node() for _ in range(room + 1_000)]
        collector._freeze_what_lives()
        assert node() is None, "the frozen objects grew by half: everything was scanned"
        del growth
