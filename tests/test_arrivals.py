"""Arrival schedules: right statistics, and reproducible from a seed."""

import numpy as np
import pytest

from loadgen.shapes import arrivals

pytestmark = pytest.mark.unit


def _gaps(offsets):
    return np.diff(offsets)


def test_poisson_mean_gap_and_cv():
    rate = 50.0
    g = _gaps(arrivals.schedule(rate, num=2001, process="poisson", seed=1))
    assert len(g) == 2000
    assert abs(g.mean() - 1 / rate) <= 0.05 / rate
    assert abs(g.std() / g.mean() - 1.0) <= 0.10


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 2.0, 4.0])
def test_gamma_cv_is_one_over_sqrt_burstiness(burstiness):
    rate = 50.0
    g = _gaps(arrivals.schedule(rate, num=20001, process="gamma", burstiness=burstiness, seed=2))
    assert abs(g.mean() - 1 / rate) <= 0.05 / rate
    assert g.std() / g.mean() == pytest.approx(1 / np.sqrt(burstiness), rel=0.10)


def test_constant_gaps_are_exact():
    g = _gaps(arrivals.schedule(8.0, num=100, process="constant"))
    assert np.allclose(g, 0.125)


def test_same_seed_same_schedule_other_seed_differs():
    a = arrivals.schedule(30.0, num=500, process="gamma", burstiness=0.5, seed=7)
    b = arrivals.schedule(30.0, num=500, process="gamma", burstiness=0.5, seed=7)
    c = arrivals.schedule(30.0, num=500, process="gamma", burstiness=0.5, seed=8)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_first_arrival_at_zero_and_duration_bound():
    s = arrivals.schedule(100.0, duration_s=30.0, seed=3)
    assert s[0] == 0.0
    assert s.max() < 30.0
    assert np.all(np.diff(s) >= 0)
    assert abs(len(s) - 3000) < 4 * np.sqrt(3000)  # Poisson count over 30 s
    both = arrivals.schedule(100.0, num=50, duration_s=30.0, seed=3)
    assert np.array_equal(both, s[:50])


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(rate=0.0),
        dict(rate=-1.0),
        dict(rate=1.0, burstiness=0.0, process="gamma"),
        dict(rate=1.0, process="weibull"),
    ],
)
def test_bad_parameters_raise(kwargs):
    rate = kwargs.pop("rate")
    with pytest.raises(ValueError):
        arrivals.schedule(rate, num=10, **kwargs)
