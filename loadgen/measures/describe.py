"""Distribution summaries: one shape for every latency figure loadgen prints."""

from __future__ import annotations

import numpy as np

PERCENTILES = (50, 90, 95, 99, 99.9)


def _key(p: float) -> str:
    return f"p{p:g}"


def describe(values, scale: float = 1.0) -> dict[str, float | int | None]:
    """count, mean, std (population), min, p50, p90, p95, p99, p99.9, max of `values * scale`.
    Percentiles interpolate linearly between order statistics (numpy's default). NaNs are
    dropped; an empty input gives count 0 and None for the rest."""
    a = np.asarray(values, dtype=float)
    a = a[~np.isnan(a)] * scale
    out: dict[str, float | int | None] = {"count": int(a.size)}
    if a.size == 0:
        out.update({k: None for k in ("mean", "std", "min", *map(_key, PERCENTILES), "max")})
        return out
    out["mean"] = float(a.mean())
    out["std"] = float(a.std())
    out["min"] = float(a.min())
    for p, v in zip(PERCENTILES, np.percentile(a, PERCENTILES)):
        out[_key(p)] = float(v)
    out["max"] = float(a.max())
    return out
