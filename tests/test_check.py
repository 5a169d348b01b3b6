"""SLO gates (`loadgen check`) and the capacity search (`loadgen capacity`) on the emulator."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest

from loadgen.capacity import search as cap
from loadgen.measures import slo
from loadgen.results import cells
from tests.conftest import cli, run_cli, server_pids

pytestmark = pytest.mark.servers

REPO = Path(__file__).resolve().parents[1]
RUN = ["--concurrency", "4", "--num-requests", "12", "--quiet"]  # the embedded emulator (no --base-url)


def test_a_lenient_slo_passes_and_a_strict_one_fails_naming_it(tmp_path):
    before = server_pids()
    ok = run_cli(
        "check",
        *RUN,
        "--output",
        str(tmp_path / "ok"),
        "--slo",
        "ttft_p99<=5s",
        "--slo",
        "tpot_p50<=200ms",
        "--slo",
        "error_rate<=0.1%",
        "--junit",
        str(tmp_path / "ok.xml"),
    )
    assert ok.returncode == 0, ok.stderr
    assert "every SLO holds" in ok.stderr and ok.stdout.count(" pass") == 3
    bad = run_cli(
        "check",
        *RUN,
        "--output",
        str(tmp_path / "bad"),
        "--slo",
        "ttft_p99<=5s",
        "--slo",
        "tpot_p50<=0.5ms",
        "--junit",
        str(tmp_path / "bad.xml"),
        "--json",
    )
    assert bad.returncode == 1, bad.stderr
    assert "FAILED: tpot_p50<=0.5ms" in bad.stderr
    verdicts = json.loads(bad.stdout)
    assert verdicts["passed"] is False
    [tpot] = [v for v in verdicts["checks"]["run"] if v["metric"] == "tpot_p50"]
    assert not tpot["passed"] and tpot["measured"] > 0.5 and tpot["margin"] < 0
    # JUnit: a test case per SLO, the failing one with a failure element
    suite = ET.parse(tmp_path / "bad.xml").getroot().find("testsuite")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert set(cases) == {"ttft_p99<=5s", "tpot_p50<=0.5ms"} and suite.get("failures") == "1"
    assert cases["tpot_p50<=0.5ms"].find("failure") is not None and cases["ttft_p99<=5s"].find("failure") is None
    assert ET.parse(tmp_path / "ok.xml").getroot().find("testsuite").get("tests") == "3"
    # the recorded results are judged again without running anything
    again = cli("check", "--results", str(tmp_path / "bad"), "--slo", "tpot_p50<=0.5ms")
    assert again.returncode == 1 and "FAILED: tpot_p50<=0.5ms" in again.stderr
    assert server_pids() <= before


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


@pytest.mark.timing
def test_capacity_lands_within_one_step_of_the_boundary_a_fine_sweep_finds(tmp_path):
    """With 8 sequences at most (max_num_seqs), a 9th user's requests queue: TTFT p95 jumps
    from ~25 ms to hundreds of ms, so ttft_p95<=50ms holds up to concurrency 8."""
    dep = tmp_path / "seq8.toml"
    text = (REPO / "servers" / "deployments" / "llama-3.1-8b.toml").read_text()
    dep.write_text(
        "\n".join("max_num_seqs = 8" if line.startswith("max_num_seqs") else line for line in text.splitlines())
    )
    # both at one fixed time scale: the same conditions, and no time-scale probe (which the sweep
    # would otherwise run at each of its four levels, 60 s here)
    common = [
        "--servers",
        str(dep),
        "--engine",
        "emulator",
        "--num-requests",
        "24",
        "--warmup",
        "2",
        "--time-scale",
        "1.5",
    ]
    wl = "synthetic:random,input_len=64,output_len=32"
    res = run_cli(
        "capacity",
        *common,
        "--variants",
        "baseline",
        "--workload",
        wl,
        "--slo",
        "ttft_p95<=50ms",
        "--start",
        "4",
        "--limit",
        "32",
        "--repeats",
        "2",
        "--output",
        str(tmp_path / "cap"),
        timeout=400,
    )
    assert res.returncode == 0, res.stderr
    found = json.loads((tmp_path / "cap" / "capacity.json").read_text())["results"][0]
    fine = run_cli(
        "sweep",
        *common,
        "--variants",
        "baseline",
        "--workloads",
        wl,
        "--concurrency",
        "7,8,9,10",
        "--quiet",
        "--output",
        str(tmp_path / "fine"),
        timeout=400,
    )
    assert fine.returncode == 0, fine.stderr
    table = pd.DataFrame(
        [
            {"level": s["cell"]["level"], "ttft_p95_ms": s["ttft_ms"]["p95"]}
            for s in (json.loads(p.read_text()) for p in (tmp_path / "fine" / cells.CELLS).glob("*/*/*/summary.json"))
        ]
    ).sort_values("level")
    holds = table["ttft_p95_ms"] <= 50
    boundary = table["level"][holds & (table["level"] < table.loc[~holds, "level"].min())].max()
    assert abs(found["capacity"] - boundary) <= 1, (found, table[["level", "ttft_p95_ms"]])
    assert "Most load within the SLOs: baseline" in res.stdout
    assert any((tmp_path / "cap" / "baseline").glob("c*-1/summary.json"))  # every probe kept
