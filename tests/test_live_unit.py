"""test_live.py's tests that start no process, apart from its tests that do (what they test: its
docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import pytest

from loadgen.outputs.live import LiveMetrics
from tests.test_live import _rec, _scrape

pytestmark = pytest.mark.unit


def test_counts_histograms_and_format():
    live = LiveMetrics(0)
    try:
        live.context("m", "eagle", "chat", "c2")
        ok = [_rec(0, [20, 30, 40]), _rec(1, [50, 55])]
        bad = _rec(2, None, "http_500")
        for r in (*ok, bad):
            live.started(r)
        live.started(_rec(3, None))  # still in flight
        for r in (*ok, bad):
            live.finished(r)
        live.sweep_planned(4)
        live.cell_started("eagle", "chat", "c2")
        ctype, s = _scrape(live.port)
    finally:
        live.close()
    assert ctype.startswith("text/plain; version=0.0.4")  # never OpenMetrics
    lab = (("level", "c2"), ("model_name", "m"), ("variant", "eagle"), ("workload", "chat"))
    assert s[("loadgen_requests_started_total", lab)] == 4
    assert s[("loadgen_requests_completed_total", lab)] == 2
    assert s[("loadgen_requests_in_flight", lab)] == 1
    assert s[("loadgen_requests_failed_total", tuple(sorted((*lab, ("error_type", "http_500")))))] == 1
    assert s[("loadgen_output_tokens_total", lab)] == 5
    assert s[("loadgen_ttft_seconds_count", lab)] == 2
    assert abs(s[("loadgen_ttft_seconds_sum", lab)] - 0.070) < 1e-9  # 20 ms + 50 ms
    assert s[("loadgen_inter_chunk_seconds_count", lab)] == 3  # 10, 10, 5 ms
    le = dict(lab + (("le", "0.01"),))
    assert s[("loadgen_inter_chunk_seconds_bucket", tuple(sorted(le.items())))] == 3
    assert s[("loadgen_tpot_seconds_count", lab)] == 2
    assert s[("loadgen_sweep_cells", (("status", "planned"),))] == 4
    assert s[("loadgen_sweep_current_cell", (("level", "c2"), ("variant", "eagle"), ("workload", "chat")))] == 1
