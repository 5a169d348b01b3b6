"""Exact figures of distributions too big to hold (loadgen.measures.pooled): fed in batches and
passes, a Pooled gives describe()'s percentiles, min and max bit for bit, and its mean and std
within 1e-12 (summation order), whatever the values (ties, negatives, zeros, weights), once it
no longer holds them whole; counted() does the same from distinct values and their counts."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.measures import pooled
from loadgen.measures.describe import describe

pytestmark = pytest.mark.unit


def _feed(p: pooled.Pooled, values: np.ndarray, counts: np.ndarray | None = None, parts: int = 13) -> dict:
    while True:
        split = np.array_split(np.arange(len(values)), parts)
        for idx in split:
            p.add(values[idx], None if counts is None else counts[idx])
        if not p.next_pass():
            return p.result()


def _same(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for key, value in want.items():
        if key in ("mean", "std"):
            assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-300), key
        else:
            assert got[key] == value, (key, got[key], value)  # exact: the same order statistics


RNG = np.random.default_rng(7)
SAMPLES = {
    "lognormal": RNG.lognormal(3, 1, 200_001),
    "ties": np.repeat([1.0, 2.0, 3.0], [5_000, 3, 100_000]),
    "small integers": RNG.integers(0, 50, 77_777).astype(float) / 7,
    "zeros and a bulk": np.concatenate([np.zeros(50_000), RNG.normal(20, 5, 123_457)]),
    "negatives": RNG.normal(0, 1, 5_000),
    "one value": np.array([4.5]),
}


@pytest.mark.parametrize("name", list(SAMPLES))
def test_passes_give_numpys_percentiles_exactly(name, monkeypatch):
    monkeypatch.setattr(pooled, "HOLD", 100)  # not held whole: the three passes
    values = SAMPLES[name]
    p = pooled.Pooled(scale=1e-3)
    got = _feed(p, values)
    _same(got, describe(values, 1e-3))
    assert p.passes == (1 if len(values) <= 100 else 3)


def test_held_whole_it_is_describe_itself():
    values = SAMPLES["lognormal"][:5_000]
    p = pooled.Pooled()
    assert _feed(p, values) == describe(values) and p.passes == 1 and p.whole


def test_weights_stand_for_repeats_without_making_them(monkeypatch):
    monkeypatch.setattr(pooled, "HOLD", 100)
    values = RNG.lognormal(2, 1, 50_000)
    counts = RNG.integers(0, 6, values.size)
    _same(_feed(pooled.Pooled(), values, counts), describe(np.repeat(values, counts)))
    monkeypatch.setattr(pooled, "HOLD", 1 << 30)  # held: the repeats made, numpy's figures exactly
    assert _feed(pooled.Pooled(), values, counts) == describe(np.repeat(values, counts))


def test_counted_distinct_values_and_their_counts():
    for _ in range(20):
        values = RNG.normal(0, 1, int(RNG.integers(1, 50)))
        counts = RNG.integers(0, 30, len(values))
        if counts.sum():
            _same(pooled.counted(values, counts), describe(np.repeat(values, counts)))
    assert pooled.counted(np.array([1.0]), np.array([0]))["count"] == 0


def test_a_pass_that_sees_other_values_is_caught(monkeypatch):
    """The passes must read the same values: if they do not, the result says so rather than
    answering from a histogram that no longer fits."""
    monkeypatch.setattr(pooled, "HOLD", 10)
    p = pooled.Pooled()
    p.add(np.arange(1000.0))
    assert p.next_pass()
    p.add(np.arange(1000.0))
    assert p.next_pass()
    p.add(np.arange(1000.0) + 0.5)  # the third pass sees other values
    assert not p.next_pass()
    with pytest.raises(AssertionError, match="passes saw different values"):
        p.result()
