"""SLO gates (`loadgen check`) and the capacity search (`loadgen capacity`) on the emulator."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.capacity import search as cap
from loadgen.measures import slo
from tests.conftest import cli

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
RUN = ["--concurrency", "4", "--num-requests", "12", "--quiet"]  # the embedded emulator (no --base-url)


@pytest.mark.parametrize("slo", ["tpot_p77<=2ms", "ttft_p99<=2", "latency<=1s", "error_rate<=5ms"])
def test_a_bad_slo_is_one_line_listing_valid_names(slo, tmp_path):
    res = cli("check", "--results", str(tmp_path), "--slo", slo)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    [line] = res.stderr.strip().splitlines()
    assert slo in line
    if slo in ("tpot_p77<=2ms", "latency<=1s"):
        assert "ttft_p99" in line and "error_rate" in line and "goodput" in line


def test_slo_parsing_and_judging():
    s = [slo.parse(t) for t in ("ttft_p99<=2s", "error_rate<=0.1%", "goodput>=95%", "output_throughput>=100")]
    assert [x.target for x in s] == [2000.0, 0.001, 0.95, 100.0]
    summary = {
        "ttft_ms": {"p99": 2500.0},
        "completed": 999,
        "failed": 1,
        "goodput": {"fraction": 0.96},
        "output_throughput_tok_s": 90.0,
    }
    v = slo.judge(summary, s)
    assert [x.passed for x in v] == [False, True, True, False]
    assert v[0].margin == -500.0 and v[1].measured == 0.001


def test_the_search_doubles_bisects_and_repeats():
    calls = []

    def probe(level):  # holds up to 21, with one noisy failure at 21 on its second run
        calls.append(level)
        return cap.Probe(level, level <= 21 and not (level == 21 and calls.count(21) == 2), 10.0 * level)

    r = cap.search("v", probe, start=1, limit=256, integer=True, repeats=3)
    assert calls[:6] == [1, 2, 4, 8, 16, 32] and r.capacity == 21
    assert r.held_at_capacity == "2/3" and r.failed_above == "3/3 at 22" and not r.sure
    assert "not sure" in r.statement
    top = cap.search("w", lambda lv: cap.Probe(lv, True, lv), start=1, limit=8, integer=True, repeats=2)
    assert top.above_limit and top.capacity == 8
    none = cap.search("x", lambda lv: cap.Probe(lv, False), start=1, limit=8, integer=True)
    assert none.capacity is None and "lowest level" in none.statement
