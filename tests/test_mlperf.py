"""MLPerf Inference's server scenario as a capacity preset (`loadgen capacity --preset
mlperf-server`, docs/check.md): LoadGen's early-stopping count checked against the regularized
incomplete beta function it is defined by (scipy's), its verdict recomputed from a probe's own
requests on the emulator, and the options it sets refused in one line."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.special import betainc

from loadgen.capacity import mlperf
from tests.conftest import cli

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("t", [0, 1, 7, 60])
def test_early_stopping_needs_the_smallest_count_the_rule_defines(t):
    h = mlperf.min_passing(t)
    # inference_rules.adoc: the smallest h with I(p - d; h, t + 1) <= 1 - c (p = 0.99, d = 0, c = 0.99)
    assert betainc(h, t + 1, 0.99) < 0.01 <= betainc(h - 1, t + 1, 0.99)
    if t == 0:  # LoadGen's own log: "Processed 21 queries. Would need to run at least 438 more"
        assert h - 21 == 438


def _frame(ttft_ms, tpot_ms, ok=None) -> pd.DataFrame:
    n = len(ttft_ms)
    return pd.DataFrame(
        {
            "ok": np.ones(n, bool) if ok is None else ok,
            "ttft_from_scheduled_ms": ttft_ms,
            "tpot_ms": tpot_ms,
            "t_scheduled_ns": np.arange(n) * 0.5e9,  # 350 s: under the 600 s minimum
        }
    )


def test_a_verdict_counts_requests_over_each_limit_as_loadgen_does():
    rng = np.random.default_rng(0)
    ttft, tpot = rng.uniform(100, 1900, 700), rng.uniform(10, 90, 700)  # llama3_1-8b: 2000 ms, 100 ms
    ttft[:3] = 2500  # three over the TTFT limit
    v = mlperf.judge(_frame(ttft, tpot))
    assert (v.ttft_over, v.tpot_over, v.n) == (3, 0, 700)
    assert v.ttft_needed == 3 + mlperf.min_passing(3) and v.tpot_needed == 459
    assert v.ttft_p99_ms == np.sort(ttft)[693] and v.constraints_met
    assert not v.early_stopping_met and "it would need at least 301 more" in v.early_stopping()  # 3 + 998
    assert not v.min_duration_met and "not a valid MLPerf run" in v.statement()
    # a failed request is over both limits; a one-token answer (no TPOT) is under
    tpot[5] = np.nan
    ok = np.ones(700, bool)
    ok[10] = False
    w = mlperf.judge(_frame(ttft, tpot, ok))
    assert (w.ttft_over, w.tpot_over) == (4, 1)
    # past 600 s: LoadGen's queries are those scheduled before it and the first at or after it
    long = _frame(np.full(1300, 100.0), np.full(1300, 10.0)).iloc[::-1]  # 0.5 s apart: 650 s, any order
    x = mlperf.judge(long)
    assert (x.n, x.not_judged, x.scheduled_s) == (1201, 99, 600.0) and x.min_duration_met and x.valid
    assert x.scheduled_per_s == pytest.approx(1200 / 600)


def test_the_preset_refuses_what_it_sets_in_one_line(tmp_path):
    base = ("capacity", "--servers", "llama-3.1-8b", "--engine", "emulator", "--output", str(tmp_path / "x"))
    for args, says in (
        (("--preset", "mlperf-server", "--slo", "ttft_p99<=1s"), "drop --slo"),
        (("--preset", "mlperf-server", "--by", "concurrency"), "drop --by concurrency"),
        (("--preset", "mlperf-server", "--duration", "12", "--start", "20"), "--start 20: a 12 s probe"),
        (("--mlperf-benchmark", "llama2-70b", "--slo", "ttft_p99<=1s"), "add that preset"),
    ):
        res = cli(*base, *args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert says in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
