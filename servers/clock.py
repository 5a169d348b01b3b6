"""Precise sleeping for servers that must write at exact times.

asyncio's own timers wake through `epoll_wait`, whose timeout is in whole milliseconds
(Python rounds it up), so `asyncio.sleep` lands 0-1 ms late: too coarse for a server whose
timings are the ground truth. `PreciseClock` keeps its deadlines in a heap and arms one Linux
timerfd (nanosecond resolution) for the earliest; the event loop wakes when the fd becomes
readable. Where timerfd is unavailable it falls back to `asyncio.sleep`.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import heapq
import itertools
import os
import time

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.timerfd_settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p]
        return libc
    except (OSError, AttributeError):
        return None


class PreciseClock:
    """`await clock.sleep_until(t)` with `t` a `time.monotonic()` value, to within the
    kernel's timer slack (tens of microseconds), not a millisecond."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, asyncio.Future]] = []
        self._seq = itertools.count()
        self._armed: float | None = None
        self._fd = -1
        libc = _libc()
        if libc is not None:
            fd = libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
            if fd >= 0:
                self._libc, self._fd = libc, fd
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def precise(self) -> bool:
        return self._fd >= 0

    def close(self) -> None:
        if self._fd >= 0:
            if self._loop is not None:
                self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1

    async def sleep_until(self, deadline: float) -> None:
        if deadline <= time.monotonic():
            return
        if self._fd < 0:
            await asyncio.sleep(deadline - time.monotonic())
            return
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._push(loop, deadline, fut)
        await fut

    def call_at(self, deadline: float, callback) -> None:
        """Call `callback()` at `deadline` (a `time.monotonic()` value) from the event loop,
        with no task switch: for servers writing tens of thousands of chunks per second."""
        loop = asyncio.get_running_loop()
        if self._fd < 0:
            loop.call_at(deadline, callback)  # the loop's clock is time.monotonic()
            return
        self._push(loop, deadline, callback)

    def _push(self, loop, deadline: float, item) -> None:
        if self._loop is None:
            self._loop = loop
            loop.add_reader(self._fd, self._fire)
        heapq.heappush(self._heap, (deadline, next(self._seq), item))
        if self._armed is None or deadline < self._armed:
            self._arm(deadline)

    def _arm(self, deadline: float) -> None:
        sec = int(deadline)
        spec = _Itimerspec(_Timespec(0, 0), _Timespec(sec, int((deadline - sec) * 1e9)))
        self._libc.timerfd_settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None)
        self._armed = deadline

    def _fire(self) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:
            pass
        now = time.monotonic()
        heap = self._heap
        try:
            while heap and heap[0][0] <= now:
                _, _, item = heapq.heappop(heap)
                if isinstance(item, asyncio.Future):
                    if not item.done():
                        item.set_result(None)
                else:
                    item()
        finally:  # a failing callback must not leave the rest unarmed
            self._armed = None
            if heap:
                self._arm(heap[0][0])
