"""When the event loop's select() returned: the time a read's bytes were there at the latest.

A burst of streams whose chunks arrive together (a server writes a whole engine step's chunks at
once) is read one socket after another; the last of a burst of 64 would be stamped milliseconds
after its bytes arrived if stamped when read. Both read paths use it: the pure-Python one for
every read's time (stream.py), the compiled one where the kernel gives no receive time, and both
for the first chunk's read delay (compiled.py).
"""

from __future__ import annotations

import asyncio
import time

_monotonic_ns = time.monotonic_ns


WAKE_NS = 100_000  # a select() that waited returns within this of the first bytes that came


class SelectClock:
    """The event loop's selector, noting when each select() returned: every socket a select
    reports readable had its bytes by then, however long the loop takes to read them all. It
    also notes how long the loop had not looked before that select (`blind_ns`: from the
    previous select's return to this call, the loop running callbacks): bytes that were waiting
    when select was called came at most that long before their time. Every other call goes to
    the selector it wraps.

    And since when the bytes it reports can have been there (`floor_ns`): a select that found
    sockets ready at once reports bytes that came after the previous select gathered its own
    (its return); one that had to wait (it first asks without waiting, which costs a system
    call only when the loop is idle anyway) reports bytes that came while it waited, the first
    of which woke it (taken to be within WAKE_NS of its return). The compiled read path bounds
    how late a chunk's time can be with it."""

    def __init__(self, selector) -> None:
        self._selector = selector
        self.returned_ns = 0
        self.blind_ns = 0
        self.floor_ns = 0

    def select(self, timeout=None):
        called = _monotonic_ns()
        events = self._selector.select(0)
        if events or timeout == 0:
            returned = _monotonic_ns()
            floor = self.returned_ns or called
        else:
            polled = _monotonic_ns()
            events = self._selector.select(timeout)
            returned = _monotonic_ns()
            floor = max(polled, returned - WAKE_NS)
        self.blind_ns = called - self.returned_ns if self.returned_ns else 0
        self.returned_ns = returned
        self.floor_ns = floor
        return events

    def __getattr__(self, name):
        return getattr(self._selector, name)


def install() -> SelectClock | None:
    """Wrap the running loop's selector (once), where the loop has one (asyncio's selector
    loops; others keep the time of each read); the loop's clock, or None."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    selector = getattr(loop, "_selector", None)
    if selector is not None and not isinstance(selector, SelectClock) and hasattr(selector, "select"):
        selector = loop._selector = SelectClock(selector)  # type: ignore[attr-defined]  # asyncio's private selector
    return selector if isinstance(selector, SelectClock) else None


def read_time(loop) -> tuple[int, int]:
    """When the current read's bytes were there, and how much earlier they may have come: the
    select() that reported the socket and the loop's blind span before it, if the loop's
    selector notes them; else now, and 0 (not known)."""
    selector = getattr(loop, "_selector", None)
    if isinstance(selector, SelectClock) and selector.returned_ns:
        return selector.returned_ns, selector.blind_ns
    return _monotonic_ns(), 0
