"""test_open_loop.py's tests that start no process, apart from its tests that do (what they test: its
docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.unit


def test_a_freed_slot_goes_to_the_longest_waiting_request():
    """executors.open_loop.Slots, the cap's one rule (the executor and the simulator both use it)."""
    from loadgen.executors.open_loop import Slots

    slots: Slots[str] = Slots(2)
    assert slots.take("a") and slots.take("b") and not slots.take("c") and not slots.take("d")
    assert slots.free() == "c" and slots.busy == 2  # handed on: the slot stays busy
    assert slots.free() == "d" and slots.free() is None and slots.busy == 1
    assert slots.free() is None and slots.busy == 0
    free_for_all: Slots[str] = Slots(None)
    assert all(free_for_all.take(str(i)) for i in range(1000)) and free_for_all.busy == 1000
