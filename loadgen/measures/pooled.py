"""Exact distribution summaries of values too many to hold: the per-chunk figures (ITL,
inter-chunk gaps, tokens per chunk, loop lag per chunk) of a run of a day are billions of
values, which come batch by batch from requests.parquet.

`Pooled` gives what `describe` gives, from values fed in passes over the same batches:
- pass 1: count, sum, min, max, and a histogram of the top 20 bits of each value's sortable
  64-bit key (a float64's bits, ordered as the floats are); while there are at most `HOLD`
  values they are also kept, and then the figures are `describe`'s own, no more passes;
- pass 2: the spread about the mean (for std), and, inside each top-20-bit bucket that holds an
  order statistic a percentile needs, a histogram of the next 16 bits;
- pass 3: the values inside each 36-bit prefix that holds one, collected with their counts (a
  prefix spans a relative width of 2^-24 of a value: a few distinct values, however many
  repeats), from which the order statistics are read off exactly.
The percentiles are then numpy's own linear interpolation between those order statistics:
equal to `np.percentile` over all the values, bit for bit (tests/test_pooled.py). Mean and std
are sums taken batch by batch, so they may differ from numpy's over one array in the last bits
(relative 1e-12: floating-point summation order; docs/metrics.md, "Long runs"). Memory, whatever
the number of values: a histogram of 2^20 counts, one of 2^16 per bucket an order statistic lies
in (at most ten), and the few values collected.
"""

from __future__ import annotations

import math

import numpy as np

from loadgen.measures.describe import PERCENTILES, _key, describe

HOLD = 1 << 18  # values kept whole (2 MiB of float64): up to this many, one pass (a run a little
# longer than this would otherwise hold four distributions of up to 8 MiB, more than its end's other needs)
_TOP = 44  # key >> _TOP: the first histogram's bucket (20 bits: 8 MiB of counts)
_MID = 28  # key >> _MID: the 36-bit prefix the second histogram narrows to (16 more bits: 512 KiB
# a bucket, for each bucket an order statistic lies in)
_SPAN = 1 << 20
_SUB = 1 << (_TOP - _MID)


def keys(values: np.ndarray, negative: bool = True) -> np.ndarray:
    """Each float64's bits as an unsigned key that sorts as the floats do (a new array);
    `negative` False: the caller knows none is below zero."""
    bits = np.ascontiguousarray(values, dtype=np.float64).view(np.uint64)
    out = bits | np.uint64(1 << 63)
    if negative:
        below = bits >= np.uint64(1 << 63)
        if below.any():
            out[below] = ~bits[below]
    return out


def _count_into(hist: np.ndarray, index: np.ndarray, weights: np.ndarray | None) -> None:
    """hist[index] += weights (1 each without), counting only over the span the indices cover
    (a batch's values sit in a few hundred of the 2^20 buckets: no 8 MiB array a batch)."""
    lo = int(index.min())
    hist[lo : int(index.max()) + 1] += np.bincount(index - lo, weights=weights)


def _table(buckets) -> np.ndarray:
    """For each of the 2^20 top buckets, 1 + its place among `buckets` (0: not one of them): one
    lookup a value finds whether its bucket is wanted, where a search or a comparison with each
    costs many times more."""
    table = np.zeros(_SPAN, np.int16)
    for i, b in enumerate(sorted(buckets)):
        table[b] = i + 1
    return table


def _value(key: int) -> float:
    bits = np.uint64(key)
    raw = bits & ~np.uint64(1 << 63) if key >> 63 else ~bits
    return float(np.array([raw], np.uint64).view(np.float64)[0])


def _ranks(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For each percentile: numpy's 'linear' virtual index, the two order statistics it lies
    between and its interpolation weight (numpy.lib._function_base_impl._quantile's steps)."""
    q = np.true_divide(np.asarray(PERCENTILES, dtype=float), 100)
    virtual = (n - 1) * q
    previous = np.floor(virtual).astype(np.intp)
    following = previous + 1
    above = virtual >= n - 1
    previous[above] = n - 1
    following[above] = n - 1
    gamma = virtual - np.where(above, -1, previous)
    return virtual, previous, following, gamma


def _lerp(a: float, b: float, t: float) -> float:
    """numpy's _lerp, on one pair."""
    a64, b64, t64 = np.float64(a), np.float64(b), np.float64(t)
    diff = b64 - a64
    out = a64 + diff * t64
    if t64 >= 0.5:
        out = b64 - diff * (1 - t64)
    return float(out)


class Pooled:
    """One distribution, fed batch by batch: `add` each batch of a pass, then `next_pass()`;
    repeat while it says so; `result()` is `describe`'s dict (scaled by `scale`)."""

    def __init__(self, scale: float = 1.0, one_pass: bool = False) -> None:
        self.scale = scale
        self.one_pass = one_pass  # never asks for a second pass (the caller has the figures otherwise)
        self.passes = 1
        self.finished = False  # no more passes wanted: what comes is not added
        self.count = 0
        self.total = 0.0
        self.lo, self.hi = math.inf, -math.inf
        self.held: list[np.ndarray] | None = []
        self.top = np.zeros(_SPAN)  # counts as float64 (exact to 2^53): bincount's weighted form
        self.spread = 0.0
        self.wanted: dict[int, int] = {}  # rank -> its top bucket, then its 36-bit prefix
        self.mid: dict[int, np.ndarray] = {}  # top bucket -> histogram of the next 16 bits
        self.found: dict[int, dict[float, int]] = {}  # 36-bit prefix -> value -> count
        self.base: dict[int, int] = {}  # 36-bit prefix -> how many values lie below it
        self._wanted_top = np.zeros(0, np.int16)  # pass 2 and 3: which top buckets matter (_table)

    def add(self, values, counts=None) -> None:
        """A batch of values; with `counts`, each value that many times (the ITL: a chunk's gap
        over its tokens, once per token), without making the repeats."""
        if self.finished:  # another distribution fed in the same passes needs more of them
            return
        a = np.asarray(values, dtype=float)
        c = None if counts is None else np.asarray(counts, dtype=np.int64)
        drop = np.isnan(a) if c is None else np.isnan(a) | (c <= 0)
        if drop.any():
            a, c = a[~drop], (None if c is None else c[~drop])
        if self.scale != 1.0:
            a = a * self.scale  # a new array: what the caller passed is left as it was
        if a.size == 0:
            return
        w = None if c is None else c.astype(float)  # histogram weights: exact below 2^53
        low = float(a.min())
        k = keys(a, negative=low < 0)
        if self.passes == 1:
            self.count += a.size if c is None else int(c.sum())
            self.total += float(a.sum() if c is None else (a * c).sum())
            self.lo, self.hi = min(self.lo, low), max(self.hi, float(a.max()))
            if self.held is not None:
                self.held.append(a if c is None else np.repeat(a, c))
                if self.count > HOLD:
                    self.held = None
            _count_into(self.top, (k >> np.uint64(_TOP)).astype(np.int64), w)
            return
        if self.passes == 2:
            mean = self.total / self.count
            sq = (a - mean) ** 2
            self.spread += float(sq.sum() if c is None else (sq * c).sum())
            order = sorted(self.mid)
            which = self._wanted_top[(k >> np.uint64(_TOP)).astype(np.int64)]
            inside = which > 0
            if inside.any():
                sub = ((k[inside] >> np.uint64(_MID)) & np.uint64(_SUB - 1)).astype(np.int64)
                place = (which[inside].astype(np.int64) - 1) * _SUB + sub
                hist = np.bincount(place, weights=None if w is None else w[inside], minlength=len(order) * _SUB)
                hist = hist.reshape(len(order), _SUB)
                for i, bucket in enumerate(order):
                    self.mid[bucket] += hist[i]
            return
        near = np.flatnonzero(self._wanted_top[(k >> np.uint64(_TOP)).astype(np.int64)] > 0)
        if near.size:  # a few values: now their full prefix
            prefixes = np.fromiter(self.found, dtype=np.uint64, count=len(self.found))
            near = near[np.isin(k[near] >> np.uint64(_MID), prefixes)]
        if near.size:
            vals, inverse = np.unique(a[near], return_inverse=True)
            times = np.bincount(inverse, weights=None if w is None else w[near]).astype(np.int64)
            for v, n, p in zip(vals.tolist(), times.tolist(), (keys(vals) >> np.uint64(_MID)).tolist()):
                seen = self.found[p]
                seen[v] = seen.get(v, 0) + n

    @property
    def whole(self) -> bool:
        """Every value held: the figures come from them at once."""
        return self.held is not None

    def next_pass(self) -> bool:
        """Ready the next pass; False when none is needed (then nothing more is added)."""
        self.finished = not self._next()
        return not self.finished

    def _next(self) -> bool:
        if self.finished:
            return False
        if self.passes == 1:
            if self.whole or self.count == 0 or self.one_pass:
                return False
            _, previous, following, _ = _ranks(self.count)
            cum = np.cumsum(self.top)
            for r in {*previous.tolist(), *following.tolist()}:
                bucket = int(np.searchsorted(cum, r, side="right"))
                self.wanted[r] = bucket
                self.mid.setdefault(bucket, np.zeros(_SUB))
            self._wanted_top = _table(self.mid)
            self.passes = 2
            return True
        if self.passes == 2:
            cum = np.cumsum(self.top)
            for r, bucket in list(self.wanted.items()):
                below = int(cum[bucket - 1]) if bucket else 0
                inner = np.cumsum(self.mid[bucket])
                sub = int(np.searchsorted(inner, r - below, side="right"))
                prefix = (bucket << (_TOP - _MID)) | sub
                self.wanted[r] = prefix
                self.found.setdefault(prefix, {})
                self.base[prefix] = below + (int(inner[sub - 1]) if sub else 0)
            self.mid.clear()
            self._wanted_top = _table({prefix >> (_TOP - _MID) for prefix in self.found})
            self.passes = 3
            return True
        return False

    def _at(self, rank: int) -> float:
        """The order statistic of `rank` (0-based) from the collected prefix it lies in."""
        prefix = self.wanted[rank]
        below = self.base[prefix]
        for v in sorted(self.found[prefix]):
            below += self.found[prefix][v]
            if rank < below:
                return v
        raise AssertionError(f"rank {rank} not in its prefix: the passes saw different values")

    def result(self) -> dict:
        if self.whole:
            return describe(np.concatenate(self.held) if self.held else np.zeros(0), 1.0)
        n = self.count
        out: dict = {"count": n, "mean": self.total / n, "std": math.sqrt(self.spread / n), "min": self.lo}
        _, previous, following, gamma = _ranks(n)
        for p, i, j, g in zip(PERCENTILES, previous.tolist(), following.tolist(), gamma.tolist()):
            out[_key(p)] = _lerp(self._at(i), self._at(j), g)
        out["max"] = self.hi
        return out


def counted(values: np.ndarray, counts: np.ndarray, scale: float = 1.0) -> dict:
    """`describe` of a distribution given as values (`scale` times them) and how often each
    occurs (the loop lag over chunk timestamps: each chunk takes the lag of the tick that
    covered it, so the distribution is the ticks' lags, each counted once per chunk it covered;
    tokens per chunk, small integers): in one pass, exact percentiles (numpy's interpolation
    between the same order statistics), mean and std from weighted sums (relative 1e-12).
    Memory: a few arrays the size of `values` (8.6 million ticks in a day)."""
    c = np.asarray(counts, dtype=np.int64)
    v = np.asarray(values)
    keep = c > 0
    if v.dtype.kind == "f":
        keep &= ~np.isnan(v)
    v, c = v[keep], c[keep]
    n = int(c.sum())
    if n == 0:
        return describe(np.zeros(0))
    order = np.argsort(v, kind="stable")
    v, c = v[order], c[order]
    del order
    d = v.astype(float) * scale
    weights = c.astype(float)
    mean = float(np.dot(d, weights)) / n
    d -= mean
    d *= d
    spread = float(np.dot(d, weights))
    del d, weights
    out: dict = {"count": n, "mean": mean, "std": math.sqrt(spread / n), "min": float(v[0]) * scale}
    cum = np.cumsum(c)
    _, previous, following, gamma = _ranks(n)
    at = lambda r: float(v[np.searchsorted(cum, r, side="right")]) * scale  # noqa: E731
    for p, i, j, g in zip(PERCENTILES, previous.tolist(), following.tolist(), gamma.tolist()):
        out[_key(p)] = _lerp(at(i), at(j), g)
    out["max"] = float(v[-1]) * scale
    return out
