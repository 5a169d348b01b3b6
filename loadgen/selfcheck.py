"""The client watching itself: how late its event loop runs, and what that did to its timestamps.

A task sleeps `interval_s` over and over and records when it woke and how much later than
asked. When the loop is busy (too many streams to parse, a burst of connections, a blocking
call), that lag also delays every chunk timestamp taken meanwhile, so the figures include the
client's own delay. Per-sample statistics undercount long stalls (a 40 ms stall is one sample),
so the lag is also judged per chunk: each chunk timestamp gets the lag of the tick that covered
it, and the p99 of that says how many timestamps the client may have delayed.
"""
from __future__ import annotations

import asyncio
import time
from array import array

import numpy as np


class LoopLagMonitor:
    def __init__(self, interval_s: float = 0.01) -> None:
        self.interval_s = interval_s
        self.at_ns = array("q")   # when each tick woke
        self.lag_ns = array("q")  # how late it woke
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _run(self) -> None:
        interval_ns = int(self.interval_s * 1e9)
        while True:
            t = time.monotonic_ns()
            await asyncio.sleep(self.interval_s)
            now = time.monotonic_ns()
            self.at_ns.append(now)
            self.lag_ns.append(max(0, now - t - interval_ns))


def lag_at(times_ns: np.ndarray, at_ns, lag_ns) -> np.ndarray:
    """The loop lag covering each time: that of the first tick that woke at or after it
    (0 for times after the last tick)."""
    at = np.asarray(at_ns, dtype=np.int64)
    lag = np.append(np.asarray(lag_ns, dtype=np.int64), 0)
    return lag[np.searchsorted(at, np.asarray(times_ns, dtype=np.int64), side="left")]
