"""R46, R48: the worker's collector scans what was promoted since the last collection, not what lives long, and
still reclaims cyclic garbage in the end (collector.py)."""

from __future__ import annotations

import gc
import weakref

import collector


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> _Node:
    first, second = _Node(), _Node()
    first.other, second.other = second, first
    return first


async def test_what_lives_is_frozen_and_a_full_collection_no_longer_scans_it() -> None:
    """What is alive when the worker starts, and what survives a collection later, is frozen: a full collection
    after that finds little to scan."""
    async with collector.keeping_the_heap():
        assert gc.get_freeze_count() > 0
        kept = [_Node() for _ in range(10_000)]
        gc.collect(1)  # a collection of the older young generation freezes its survivors
        assert gc.get_count()[2] == 0
        before = gc.get_freeze_count()
        assert before >= len(kept)
        del kept
        assert gc.get_freeze_count() <= before - 10_000, "a frozen object is freed when its last reference goes"
    assert gc.get_freeze_count() == 0, "leaving the block unfreezes everything"


async def test_cyclic_garbage_among_frozen_objects_is_reclaimed_when_everything_is_scanned() -> None:
    """A cycle that became garbage after it was frozen stays until the cleaner scans everything, then it goes."""
    async with collector.keeping_the_heap():
        held = _cycle()
        node = weakref.ref(held)
        gc.collect(1)  # frozen while alive
        del held  # now garbage, held only by its own cycle
        gc.collect(1)
        assert node() is not None, "frozen, the cycle is not collected"
        gc.collect()
        assert node() is not None, "a full collection does not scan frozen objects"
        collector._scan_everything()
        assert node() is None
