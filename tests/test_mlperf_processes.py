"""test_mlperf.py's tests that start processes, apart from its tests that start none (what they test:
its docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy.special import betainc

from tests.conftest import run_cli

pytestmark = [pytest.mark.servers]


def test_the_preset_reports_the_rate_it_held_with_its_early_stopping_verdict(tmp_path):
    """On the emulator, one short probe (6 s, not MLPerf's 600 s: it says so): Poisson arrivals at
    the rate asked, and the verdict in capacity.json recomputed from the probe's own requests."""
    out = tmp_path / "mlperf"
    res = run_cli(
        "capacity",
        *("--servers", "llama-3.1-8b", "--engine", "emulator", "--variants", "baseline"),
        *("--workload", "chat,output=fixed:32", "--preset", "mlperf-server", "--duration", "6"),
        *("--start", "90", "--limit", "90", "--output", str(out)),
    )
    assert res.returncode == 0, res.stderr
    assert "shorter than MLPerf's 600 s" in res.stderr
    assert "holds at every level up to the limit 90" in res.stdout
    assert "early stopping successful" in res.stdout and "min duration NOT met (6 s < 600 s)" in res.stdout
    found = json.loads((out / "capacity.json").read_text())
    assert found["preset"]["benchmark"] == "llama3_1-8b" and found["preset"]["ttft_p99_limit_ms"] == 2000
    (probe,) = found["results"][0]["probes"]
    frame = pd.read_parquet(out / "baseline" / "r90-1" / "requests.parquet")
    n = len(frame)
    gaps = np.diff(np.sort(frame["t_scheduled_ns"].to_numpy())) / 1e9
    assert 400 < n < 700 and abs(gaps.mean() * 90 - 1) < 0.15 and abs(gaps.std() / gaps.mean() - 1) < 0.15
    ttft = np.sort(frame["ttft_from_scheduled_ms"].to_numpy())
    tpot = np.sort(frame["tpot_ms"].to_numpy())
    v = probe["detail"]
    assert v["n"] == n and v["ttft_p99_ms"] == ttft[int(n * 0.99)] and v["tpot_p99_ms"] == tpot[int(n * 0.99)]
    t = int((ttft > 2000).sum())
    h = next(h for h in range(1, 10**5) if betainc(h, t + 1, 0.99) < 0.01)
    assert v["ttft_needed"] == h + t and v["early_stopping_met"] == (n >= v["ttft_needed"]) and probe["passed"]
    assert not v["min_duration_met"] and not v["valid"]
