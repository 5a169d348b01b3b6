"""The client watching itself: how late its event loop runs.

A task sleeps `interval_s` over and over and records how much later than asked it woke up.
When the loop is busy (too many streams to parse, a blocking call), that lag also delays every
chunk timestamp the client takes, so the figures it would report include its own delay.
"""
from __future__ import annotations

import asyncio
import time
from array import array


class LoopLagMonitor:
    def __init__(self, interval_s: float = 0.01) -> None:
        self.interval_s = interval_s
        self.lag_ns = array("q")
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
            self.lag_ns.append(max(0, time.monotonic_ns() - t - interval_ns))
