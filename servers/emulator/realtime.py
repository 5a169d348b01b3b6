"""The engine in real time: plan a step, sleep (precisely) until it would end on the GPU,
apply it, hand each request its tokens. New requests join the next step (continuous batching).

The engine runs in modeled time (timeline.py): at time scale S every step takes S times its
modeled duration in real time, and everything the engine records (its latency histograms) is
the emulated hardware's. Steps follow each other back to back on the modeled clock, so the
emulator's own Python work between steps (applying a step, writing chunks, planning the next)
is hidden inside the next step's time, as a GPU server overlaps its CPU work. Three measures say
whether it keeps up, exported in /metrics and warned about in the log:
- lost time: when that work takes longer than the next step itself (planned once the work is
  done, the step would already be over), the schedule restarts from now rather than compress
  the step; the modeled time between where it should have started and where it did is lost.
  Modeled step time over modeled time plus lost time is the share of its model's throughput
  the emulator delivered for the steps it ran (`emulator:modeled_seconds_total`,
  `emulator:lost_seconds_total`);
- lag: how long after a step's modeled end its chunks were written, in emulated seconds (what
  a client's converted timestamps carry on top of the model);
- slowdown: actual over modeled time of the recent steps, chunk writing included (1.0 = real
  time; informative: writing late does not cost throughput while the schedule holds).
On a small machine it can fall behind, and a user must see it; a larger time scale is the cure.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

from servers.clock import PreciseClock
from servers.emulator.engine import Engine, Sequence
from servers.emulator.timeline import Timeline, check_scale

log = logging.getLogger("loadgen.emulator")
WINDOW = 200  # steps the warnings look back over


class RealtimeDriver:
    def __init__(
        self,
        engine: Engine,
        *,
        time_scale: float = 1.0,
        warn_lag_s: float = 0.005,
        warn_lost: float = 0.02,
        warn_every_s: float = 10.0,
    ) -> None:
        self.engine = engine
        self.timeline = Timeline(time_scale, time.monotonic())
        self.clock = PreciseClock()
        self.warn_lag_s = warn_lag_s
        self.warn_lost = warn_lost
        self.warn_every_s = warn_every_s
        self._work = asyncio.Event()
        # lag (emulated s), actual and modeled step time (modeled s), lost time before the step
        self._recent: deque[tuple[float, float, float, float]] = deque(maxlen=WINDOW)
        self._last_warning = 0.0
        self._next_scale: float | None = None
        engine.stats.time_scale = self.timeline.scale

    @property
    def time_scale(self) -> float:
        return self._next_scale if self._next_scale is not None else self.timeline.scale

    def set_time_scale(self, scale: float) -> float:
        """Run at `scale`: at once when idle, else from the next step on (modeled time runs on
        without a jump)."""
        scale = check_scale(scale)
        if self.engine.has_work:
            self._next_scale = scale
        else:
            self.timeline.rescale(scale, time.monotonic())
            self.engine.stats.time_scale, self._next_scale = scale, None
        return scale

    def submit(self, *args, **kwargs) -> Sequence:
        seq = self.engine.submit(*args, arrival=self.timeline.modeled(time.monotonic()), **kwargs)
        self._work.set()
        return seq

    def abort(self, seq: Sequence) -> None:
        self.engine.abort(seq)

    def close(self) -> None:
        self.clock.close()

    @property
    def slowdown(self) -> float:
        modeled = sum(r[2] for r in self._recent)
        return sum(r[1] for r in self._recent) / modeled if modeled else 1.0

    async def run(self) -> None:
        engine, line, stats = self.engine, self.timeline, self.engine.stats
        t: float | None = None  # when the next step starts on the modeled clock (back to back)
        while True:
            if not engine.has_work:
                self._work.clear()
                await self._work.wait()
                t = None
            began = time.monotonic()
            if self._next_scale is not None:  # from where the next step starts, at the new scale
                line.rescale(self._next_scale, began if t is None else line.real(t))
                stats.time_scale, self._next_scale = line.scale, None
            now = line.modeled(began)
            start = now if t is None else t
            step = engine.plan(start)
            if step is None:  # nothing schedulable yet (should not happen): yield and retry
                await asyncio.sleep(0.001)
                t = None
                continue
            lost = 0.0
            if start + step.duration < now:  # the work since the last step took longer than this
                lost = now - start  # one: it starts now, the time in between is lost
                self._restart(step, start, now)
                start = now
                stats.lost_seconds += lost
            end = start + step.duration
            end_real = line.real(end)
            await self.clock.sleep_until(end_real)
            for em in engine.commit(step, end):
                if em.seq.sink is not None:
                    em.seq.sink(em)
            delivered = time.monotonic()
            stats.modeled_seconds += step.duration
            self._observe(
                (delivered - end_real) / line.scale,
                (delivered - min(began, line.real(start))) / line.scale,
                step.duration,
                lost,
            )
            t = end

    @staticmethod
    def _restart(step, planned: float, now: float) -> None:
        """The step begins at `now`, not `planned`: what it admitted was first scheduled now."""
        step.start = now
        for seq, _ in step.batch:
            if seq.first_scheduled == planned:
                seq.first_scheduled = now

    def _observe(self, lag: float, actual: float, modeled: float, lost: float) -> None:
        stats = self.engine.stats
        stats.lag.observe(max(0.0, lag))
        self._recent.append((max(0.0, lag), actual, modeled, lost))
        stats.slowdown = self.slowdown
        now = time.monotonic()
        if len(self._recent) < 20 or now - self._last_warning < self.warn_every_s:
            return
        lags = sorted(r[0] for r in self._recent)
        p99 = lags[int(0.99 * (len(lags) - 1))]
        modeled_total = sum(r[2] for r in self._recent)
        lost_share = sum(r[3] for r in self._recent) / (modeled_total + sum(r[3] for r in self._recent))
        if p99 > self.warn_lag_s or lost_share > self.warn_lost:
            self._last_warning = now
            log.warning(
                "emulator is behind its schedule: %.1f%% of the modeled time lost to steps that ended "
                "late, chunks written %.1f ms (emulated) after their step's end at p99, steps taking "
                "%.2fx their modeled time over the last %d steps (%d requests running, time scale %g); "
                "raise --time-scale, lower the load or give the emulator a core of its own",
                100 * lost_share,
                p99 * 1e3,
                stats.slowdown,
                len(lags),
                len(self.engine.running),
                self.timeline.scale,
            )
