"""`loadgen sweep --acceptance-lengths`: an SD variant pinned at several mean acceptance lengths
with vLLM's synthetic acceptance, and the report's break-even acceptance per load level: how
good the drafter must be for SD to pay at that load. Pinned against `loadgen simulate`."""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pandas as pd
import pytest

from tests.conftest import run_cli

LENGTHS = (1.2, 1.6, 2.2)
LEVELS = (1, 16, 64)
EAGLE3 = {"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}


def _break_even(speedups: dict[float, float]) -> float | None:
    """The lowest acceptance length with speedup 1, linear between the measured lengths."""
    pts = sorted(speedups.items())
    for (a0, s0), (a1, s1) in zip(pts, pts[1:]):
        if s0 < 1.0 <= s1:
            return a0 + (1.0 - s0) / (s1 - s0) * (a1 - a0)
    return None


def test_break_even_acceptance_rises_with_load_and_matches_the_simulator(tmp_path):
    out = tmp_path / "sweep"
    res = run_cli("sweep", "--variants", "baseline,eagle3", "--acceptance-lengths", ",".join(map(str, LENGTHS)),
                  "--workloads", "chat,output=fixed:64", "--concurrency", ",".join(map(str, LEVELS)),
                  "--time-scale", "2", "--output", str(out), timeout=900)
    assert res.returncode == 0, res.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["plan"]["variants"] == ["baseline"] + [f"eagle3-al{a:g}" for a in LENGTHS]
    res = run_cli("report", str(out))
    assert res.returncode == 0, res.stderr
    table = pd.read_csv(out / "report" / "break_even_acceptance.csv").set_index("level")
    assert list(table.index) == list(LEVELS)
    sweep = table["break_even_acceptance"]
    # measured acceptance is the pinned one (the server's counters)
    acc = pd.read_csv(out / "report" / "acceptance.csv")
    for a in LENGTHS:
        got = acc.loc[acc["variant"] == f"eagle3-al{a:g}", "mean_acceptance_length"]
        assert got.to_numpy() == pytest.approx([a] * len(LEVELS), rel=0.08)
    # the same settings in virtual time (two simulations at a time: virtual time needs no quiet machine)
    def simulate(level: int, a: float | None) -> float:
        spec = None if a is None else {**EAGLE3, "rejection_sample_method": "synthetic",
                                       "synthetic_acceptance_length": a}
        d = tmp_path / f"sim-{level}-{a}"
        r = run_cli("simulate", "--profile", "h100-llama-3.1-8b", "--workload", "chat,output=fixed:64",
                    "--concurrency", str(level), "--num-requests", str(max(8, 2 * level)), "--warmup", "0",
                    *(["--speculative-config", json.dumps(spec)] if spec else []), "--output", str(d))
        assert r.returncode == 0, r.stderr
        return json.loads((d / "summary.json").read_text())["output_throughput_tok_s"]

    runs = [(level, a) for level in LEVELS for a in (None, *LENGTHS)]
    with ThreadPoolExecutor(2) as pool:
        tps = dict(zip(runs, pool.map(lambda run: simulate(*run), runs)))
    sim = {level: _break_even({a: tps[level, a] / tps[level, None] for a in LENGTHS}) for level in LEVELS}
    assert all(sim[lv] is not None for lv in LEVELS), sim
    assert sim[1] < sim[16] < sim[64]  # more users: the drafter must be better for SD to pay
    assert sweep[1] < sweep[64] and sweep.is_monotonic_increasing
    for level in LEVELS:
        assert sweep[level] == pytest.approx(sim[level], abs=0.1), (level, sweep.to_dict(), sim)
