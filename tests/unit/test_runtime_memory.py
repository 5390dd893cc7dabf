"""A long-running process freezes what start-up allocated and collects its young generation less often."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from settlekit.runtime.memory import THRESHOLDS, settle_after_start_up


@pytest.fixture
def restored_gc() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)
    gc.unfreeze()


def test_start_up_objects_are_frozen_and_the_thresholds_set(restored_gc: None) -> None:
    kept = [object() for _ in range(10)]  # a start-up allocation still referenced
    settle_after_start_up()
    assert gc.get_threshold() == THRESHOLDS
    assert gc.get_freeze_count() > len(kept)


def test_cyclic_garbage_made_afterwards_is_still_collected(restored_gc: None) -> None:
    settle_after_start_up()

    class Node:
        other: object = None

    a, b = Node(), Node()
    a.other, b.other = b, a
    ident = id(a)
    del a, b
    gc.collect()
    assert all(id(o) != ident for o in gc.get_objects() if type(o).__name__ == "Node")
