"""test_check.py's tests that start processes, apart from its tests that start none (what they test:
its docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pandas as pd
import pytest

from loadgen.results import cells
from tests.conftest import cli, run_cli, server_pids
from tests.test_check import REPO, RUN

pytestmark = [pytest.mark.servers]


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
