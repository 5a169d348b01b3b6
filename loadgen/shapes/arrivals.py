"""Open-loop arrival schedules: seeded, so the same seed gives the identical schedule.

A schedule is an array of send offsets in seconds from the start of the run; the first request
goes at 0 and gaps follow the chosen process:
- poisson: exponential gaps with mean 1/rate (coefficient of variation 1);
- gamma: gamma gaps with shape B (the burstiness) and mean 1/rate, so CV = 1/sqrt(B);
  B < 1 is burstier than Poisson, B > 1 smoother, B = 1 is Poisson;
- constant: every gap exactly 1/rate.
"""

from __future__ import annotations

import numpy as np

PROCESSES = ("poisson", "gamma", "constant")
_BLOCK = 4096


def gaps(
    rate: float, n: int, *, process: str = "poisson", burstiness: float = 1.0, rng: np.random.Generator
) -> np.ndarray:
    if rate <= 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    if burstiness <= 0:
        raise ValueError(f"burstiness must be > 0, got {burstiness}")
    if process == "poisson":
        return rng.exponential(1.0 / rate, size=n)
    if process == "gamma":
        return rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
    if process == "constant":
        return np.full(n, 1.0 / rate)
    raise ValueError(f"unknown arrival process {process!r}; valid: {', '.join(PROCESSES)}")


def schedule(
    rate: float,
    *,
    num: int | None = None,
    duration_s: float | None = None,
    process: str = "poisson",
    burstiness: float = 1.0,
    seed: int = 0,
) -> np.ndarray:
    """Send offsets (seconds) for up to `num` arrivals, all before `duration_s`."""
    if num is None and duration_s is None:
        raise ValueError("bound the schedule by num and/or duration_s")
    rng = np.random.default_rng(seed)
    parts, t, count = [], 0.0, 0
    while True:
        block = _BLOCK if num is None else min(_BLOCK, num - count)
        if block <= 0:
            break
        g = gaps(rate, block, process=process, burstiness=burstiness, rng=rng)
        offsets = t + np.concatenate(([0.0], np.cumsum(g[:-1])))
        t = offsets[-1] + g[-1]
        if duration_s is not None and offsets[-1] >= duration_s:
            parts.append(offsets[offsets < duration_s])
            break
        parts.append(offsets)
        count += block
    return np.concatenate(parts) if parts else np.empty(0)
