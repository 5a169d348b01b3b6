"""test_repeats.py's tests that start no process, apart from its tests that do (what they test: its
docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import math

import pytest

from bench.aa_calibration import DESIGN as ARGS
from bench.aa_calibration import false_mark_bound
from loadgen.report.ttest import t_quantile, t_two_sided
from tests.conftest import cli

pytestmark = pytest.mark.unit


def test_the_aa_bound_holds_for_calibrated_p_values():
    """The A/A bound's derivation, checked by drawing: 16 comparisons without a change, their
    p-values uniform (a calibrated test), through compare's own Holm correction; whether the
    real p-values are calibrated is what bench/aa_calibration.py measures."""
    import numpy as np

    from loadgen.report.compare import holm

    rng = np.random.default_rng(0)
    marks = np.array([(holm(rng.uniform(size=16)) < 0.05).sum() for _ in range(20_000)])
    assert (marks > 0).mean() == pytest.approx(1 - (1 - 0.05 / 16) ** 16, abs=0.005)  # family-wise: alpha
    bound = false_mark_bound(16)
    assert (marks > bound).mean() <= 1e-3 < (marks > bound - 1).mean()  # the smallest bound that holds


@pytest.mark.parametrize("bad", ["0", "-2"])
def test_bad_repeats_is_one_line(bad, tmp_path):
    res = cli(*ARGS[:-3], "--repeats", bad, "--output", str(tmp_path / "x"))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "--repeats must be >= 1" in res.stderr and not (tmp_path / "x").exists()


def test_student_t_against_its_tables():
    """Two-sided t: the printed tables' 5% points, the normal limit, and SciPy (the `test` extra)."""
    for df, t in ((1, 12.706), (2, 4.303), (4, 2.776), (10, 2.228), (30, 2.042)):
        assert t_two_sided(t, df) == pytest.approx(0.05, abs=2e-4)
        assert t_quantile(0.95, df) == pytest.approx(t, abs=1e-3)
    assert t_two_sided(1.959964, math.inf) == pytest.approx(0.05, abs=1e-6)
    assert t_two_sided(0.0, 5) == pytest.approx(1.0)
    from scipy import stats

    for t in (0.3, 1.5, 3.0, 9.0):
        for df in (1, 3, 7.5, 40, 1000):
            assert t_two_sided(t, df) == pytest.approx(2 * stats.t.sf(t, df), rel=1e-9, abs=1e-15)
