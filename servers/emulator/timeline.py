"""The emulated hardware's clock against this machine's.

At time scale S the emulated GPU runs S times slower than its model: a step modeled to take
d seconds takes S x d real seconds. The engine lives entirely in modeled time (arrivals, step
starts and ends, its latency histograms); only the driver that sleeps through steps, and the
client that times responses, see real time. Dividing real durations by S gives the emulated
hardware's figures back; every ratio (speedup, acceptance) is the same at any S, while the
machine's own delays (Python work between steps, the client reading chunks) shrink by S in
emulated terms. `loadgen` converts its timestamps the same way (loadgen/load/timescale.py).

    modeled = m0 + (real - r0) / S        real = r0 + (modeled - m0) x S

Changing S re-anchors the mapping at a given real instant, so modeled time runs on without a
jump. At S = 1 modeled time is this machine's monotonic clock.
"""

from __future__ import annotations

import math


class TimeScaleError(ValueError):
    pass


def check_scale(scale) -> float:
    """The scale as a float; TimeScaleError naming the problem when it is not a number > 0."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise TimeScaleError(f"time scale must be a number > 0, got {scale!r}")
    return float(scale)


class Timeline:
    __slots__ = ("scale", "_r0", "_m0")

    def __init__(self, scale: float = 1.0, at: float = 0.0) -> None:
        self.scale = check_scale(scale)
        self._r0 = self._m0 = at

    def modeled(self, real: float) -> float:
        return self._m0 + (real - self._r0) / self.scale

    def real(self, modeled: float) -> float:
        return self._r0 + (modeled - self._m0) * self.scale

    def rescale(self, scale: float, at_real: float) -> None:
        """From `at_real` on, run at `scale`; the modeled time at that instant is unchanged."""
        scale = check_scale(scale)
        self._m0, self._r0, self.scale = self.modeled(at_real), at_real, scale
