"""The engine in real time: plan a step, sleep (precisely) until it would end on the GPU,
apply it, hand each request its tokens. New requests join the next step (continuous batching).

Steps follow each other back to back on the modeled clock, so the emulator's own Python work
between steps (applying a step, writing chunks, planning the next) is hidden inside the next
step's modeled time, as a GPU server overlaps its CPU work. Two measures say whether it keeps
up, exported in /metrics and warned about in the log:
- lag: how long after a step's modeled end its chunks were actually written (what a client's
  timestamps carry on top of the model);
- slowdown: actual over modeled time of the recent steps (1.0 = real time).
When it falls more than `max_catchup_s` behind, it restarts its schedule from now rather than
compress later steps: on a small machine it can fall behind, and a user must see it.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

from servers.clock import PreciseClock
from servers.emulator.engine import Engine, Sequence

log = logging.getLogger("loadgen.emulator")
WINDOW = 200  # steps the warnings look back over


class RealtimeDriver:
    def __init__(self, engine: Engine, *, time_scale: float = 1.0, max_catchup_s: float = 0.002,
                 warn_lag_s: float = 0.005, warn_slowdown: float = 1.1,
                 warn_every_s: float = 10.0) -> None:
        self.engine = engine
        self.time_scale = time_scale  # 0.5: steps take half their modeled time
        self.clock = PreciseClock()
        self.max_catchup_s = max_catchup_s
        self.warn_lag_s = warn_lag_s
        self.warn_slowdown = warn_slowdown
        self.warn_every_s = warn_every_s
        self._work = asyncio.Event()
        self._recent: deque[tuple[float, float, float]] = deque(maxlen=WINDOW)  # lag, actual, modeled
        self._last_warning = 0.0

    def submit(self, *args, **kwargs) -> Sequence:
        seq = self.engine.submit(*args, arrival=time.monotonic(), **kwargs)
        self._work.set()
        return seq

    def abort(self, seq: Sequence) -> None:
        self.engine.abort(seq)

    def close(self) -> None:
        self.clock.close()

    @property
    def slowdown(self) -> float:
        modeled = sum(m for _, _, m in self._recent)
        return sum(a for _, a, _ in self._recent) / modeled if modeled else 1.0

    async def run(self) -> None:
        engine = self.engine
        t: float | None = None  # when the next step starts on the modeled clock
        while True:
            if not engine.has_work:
                self._work.clear()
                await self._work.wait()
                t = None
            began = time.monotonic()
            start = began if t is None else t
            step = engine.plan(start)
            if step is None:  # nothing schedulable yet (should not happen): yield and retry
                await asyncio.sleep(0.001)
                t = None
                continue
            end = start + step.duration * self.time_scale
            await self.clock.sleep_until(end)
            for em in engine.commit(step, end):
                if em.seq.sink is not None:
                    em.seq.sink(em)
            delivered = time.monotonic()
            self._observe(delivered - end, delivered - min(began, start), end - start)
            t = end if delivered - end <= self.max_catchup_s else None  # else: restart from now

    def _observe(self, lag: float, actual: float, modeled: float) -> None:
        stats = self.engine.stats
        stats.lag.observe(max(0.0, lag))
        self._recent.append((max(0.0, lag), actual, modeled))
        stats.slowdown = self.slowdown
        now = time.monotonic()
        if len(self._recent) < 20 or now - self._last_warning < self.warn_every_s:
            return
        lags = sorted(r[0] for r in self._recent)
        p99 = lags[int(0.99 * (len(lags) - 1))]
        if p99 > self.warn_lag_s or stats.slowdown > self.warn_slowdown:
            self._last_warning = now
            log.warning("emulator is behind its schedule: chunks written %.1f ms after their step's "
                        "end at p99, steps taking %.2fx their modeled time over the last %d steps "
                        "(%d requests running); lower the load or give the emulator a core of its own",
                        p99 * 1e3, stats.slowdown, len(lags), len(self.engine.running))
