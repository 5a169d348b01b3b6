"""The client watching its own event loop: a task sleeps `interval_s` over and over and records
when it woke and how much later than asked. The ticks are plain data for the judgement
(loadgen.measures.selfcheck), which needs no running loop."""

from __future__ import annotations

import asyncio
import time
from array import array


class LoopLagMonitor:
    def __init__(self, interval_s: float = 0.01) -> None:
        self.interval_s = interval_s
        self.at_ns = array("q")  # when each tick woke
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
